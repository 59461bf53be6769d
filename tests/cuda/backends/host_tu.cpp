// tests/cuda/backends: this translation unit is built WITHOUT the CUDA runtime (the host backend
// of pin() and to_device()), cudart_tu.cpp WITH it, and both are linked into one program. The
// backend-dependent names live in a keyed inline namespace (core/config.hpp), so each unit keeps
// its own pin_stage, to_device_stage and cuda::probe_device(); without it the two units would
// define one name two ways and the linker would keep one of them for both.
#include <string>
#include <typeinfo>

#include "sluice/cuda/runtime.hpp"
#include "sluice/stage/pin.hpp"
#include "sluice/stage/to_device.hpp"

static_assert(!SLUICE_HAS_CUDART(), "host_tu.cpp must be built without SLUICE_WITH_CUDA");

std::string host_to_device_type() { return typeid(decltype(sluice::to_device())).name(); }
std::string host_probe() { return sluice::cuda::probe_device().reason; }
std::size_t host_pin_batches() { return sluice::pin().stats().batches; }
