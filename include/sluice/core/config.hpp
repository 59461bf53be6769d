// sluice/core/config.hpp — version and feature macros.
//
// SLUICE_HAS_CUDART() is a function-like macro so that a misspelt use is a compile error rather
// than a silent 0. It is 1 when the CUDA runtime API header can be included (the sluice::cuda
// target adds the toolkit's include directory and defines SLUICE_WITH_CUDA=1); headers under
// sluice/cuda/ wrap their CUDA-only parts in `#if SLUICE_HAS_CUDART()`.
#pragma once

#include <cstddef>

#define SLUICE_VERSION_MAJOR 0
#define SLUICE_VERSION_MINOR 1
#define SLUICE_VERSION_PATCH 0

#if defined(SLUICE_WITH_CUDA) && SLUICE_WITH_CUDA && defined(__has_include)
#  if __has_include(<cuda_runtime_api.h>)
#    define SLUICE_HAS_CUDART_IMPL 1
#  else
#    define SLUICE_HAS_CUDART_IMPL 0
#  endif
#else
#  define SLUICE_HAS_CUDART_IMPL 0
#endif
#define SLUICE_HAS_CUDART() SLUICE_HAS_CUDART_IMPL

// What differs with SLUICE_HAS_CUDART() (pin(), pin_stage, to_device(), to_device_stage,
// cuda::probe_device()) is declared inside `inline namespace SLUICE_BACKEND_NAMESPACE`, so the
// names carry the backend: a program whose translation units differ in the macro (one links
// sluice::cuda, one does not) links two sets of distinct names rather than two different
// definitions of one name (an ODR violation the linker would resolve silently). Users still write
// sluice::pin(), sluice::to_device_stage.
#if SLUICE_HAS_CUDART_IMPL
#  define SLUICE_BACKEND_NAMESPACE backend_cudart
#else
#  define SLUICE_BACKEND_NAMESPACE backend_host
#endif

#if defined(__CUDACC__)
#  define SLUICE_HOST_DEVICE __host__ __device__
#else
#  define SLUICE_HOST_DEVICE
#endif

#if defined(__GNUC__) || defined(__clang__)
#  define SLUICE_LIKELY(x) __builtin_expect(!!(x), 1)
#  define SLUICE_UNLIKELY(x) __builtin_expect(!!(x), 0)
#  define SLUICE_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#  define SLUICE_LIKELY(x) (x)
#  define SLUICE_UNLIKELY(x) (x)
#  define SLUICE_ALWAYS_INLINE inline
#endif

namespace sluice {
inline constexpr int version_major = SLUICE_VERSION_MAJOR;
inline constexpr int version_minor = SLUICE_VERSION_MINOR;
inline constexpr int version_patch = SLUICE_VERSION_PATCH;
// Size of a destructive-interference region: counters written by different threads are kept
// this far apart. 64 on every x86-64 and most Arm cores; a constant so the ABI does not depend on
// the compiler's -mtune (std::hardware_destructive_interference_size warns about exactly that).
inline constexpr std::size_t cache_line = 64;
}  // namespace sluice
