# CUDA support: the sluice::cuda target (host code that calls the CUDA runtime API, compiled by the
# C++ compiler) and, when nvcc is present, the CUDA language for the few translation units that
# include sluice/cuda/*.cuh (Thrust and kernels).
#
#   sluice::cuda      INTERFACE: sluice + CUDA::cudart + SLUICE_WITH_CUDA=1. Created when
#                     find_package(CUDAToolkit) succeeds. SLUICE_HAS_CUDART() (core/config.hpp) is 1
#                     in every translation unit that links it.
#   SLUICE_HAS_NVCC   ON when the CUDA language could be enabled (check_language found nvcc);
#                     only then are the .cu tests and benchmarks added.
#   sluice_cuda_sources(<target>)
#                     gives a target with .cu sources what CMake 3.25 cannot: -std=c++20 for nvcc
#                     (CUDA_STANDARD 20 silently falls back to C++17 there), and the flags the .cuh
#                     headers rely on.
#
# A machine without a GPU (CI, every dev box) still builds everything here: device detection happens
# at run time and GPU tests report "Skipped" (see tests/cuda/device).

option(SLUICE_GPU_CHECKS
  "Build only the GPU tests and benchmarks (plain executables; no doctest or Google Benchmark needed): bench/gpu_check.sh"
  OFF)
set(SLUICE_HAS_NVCC OFF CACHE INTERNAL "nvcc can compile sluice's .cu files")
find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND)
  message(STATUS "sluice: no CUDA toolkit found; sluice::cuda is not built (the host backend stands in)")
  return()
endif()

add_library(sluice_cuda INTERFACE)
add_library(sluice::cuda ALIAS sluice_cuda)
target_link_libraries(sluice_cuda INTERFACE sluice CUDA::cudart)
target_compile_definitions(sluice_cuda INTERFACE SLUICE_WITH_CUDA=1)
message(STATUS "sluice: CUDA toolkit ${CUDAToolkit_VERSION} found; sluice::cuda enabled")

# nvJPEG, for cuda/nvjpeg.cuh: sluice::nvjpeg (INTERFACE: sluice::cuda + libnvjpeg) when found —
# the toolkit's own (CUDA::nvjpeg), else a directory holding include/nvjpeg.h and lib/libnvjpeg.so*
# (PyPI's nvidia-nvjpeg wheel: its nvidia/cu13 directory, pip-installed or unpacked), named by
# -DSLUICE_NVJPEG_ROOT=<dir> or found in python3's site-packages.
set(SLUICE_NVJPEG_ROOT "" CACHE PATH "a directory with include/nvjpeg.h and lib/libnvjpeg.so* (PyPI's nvidia-nvjpeg)")
if(TARGET CUDA::nvjpeg)
  add_library(sluice_nvjpeg INTERFACE)
  target_link_libraries(sluice_nvjpeg INTERFACE sluice_cuda CUDA::nvjpeg)
else()
  set(_nvjpeg_hints ${SLUICE_NVJPEG_ROOT})
  find_program(_sluice_python3 NAMES python3)
  if(NOT SLUICE_NVJPEG_ROOT AND _sluice_python3)
    execute_process(COMMAND ${_sluice_python3} -c
                    "import importlib.util as u; s = u.find_spec('nvidia'); print(';'.join(s.submodule_search_locations) if s else '')"
                    OUTPUT_VARIABLE _nvidia_dirs OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    foreach(_d IN LISTS _nvidia_dirs)
      list(APPEND _nvjpeg_hints ${_d}/cu${CUDAToolkit_VERSION_MAJOR} ${_d}/nvjpeg)
    endforeach()
  endif()
  find_path(SLUICE_NVJPEG_INCLUDE_DIR nvjpeg.h HINTS ${_nvjpeg_hints} PATH_SUFFIXES include NO_DEFAULT_PATH)
  find_library(SLUICE_NVJPEG_LIBRARY NAMES nvjpeg libnvjpeg.so.${CUDAToolkit_VERSION_MAJOR}
               HINTS ${_nvjpeg_hints} PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
  if(SLUICE_NVJPEG_INCLUDE_DIR AND SLUICE_NVJPEG_LIBRARY)
    add_library(sluice_nvjpeg INTERFACE)
    target_include_directories(sluice_nvjpeg SYSTEM INTERFACE ${SLUICE_NVJPEG_INCLUDE_DIR})
    target_link_libraries(sluice_nvjpeg INTERFACE sluice_cuda ${SLUICE_NVJPEG_LIBRARY})
  endif()
endif()
if(TARGET sluice_nvjpeg)
  add_library(sluice::nvjpeg ALIAS sluice_nvjpeg)
  message(STATUS "sluice: nvJPEG found; sluice::nvjpeg enabled")
else()
  message(STATUS "sluice: no nvJPEG (toolkit or -DSLUICE_NVJPEG_ROOT, e.g. PyPI's nvidia-nvjpeg); the nvJPEG backend is not built")
endif()

# nvcc is optional even with the runtime present (a runtime-only install can still run the host
# side). check_language() tries the compiler in a sub-build, so a machine without a working nvcc
# configures instead of failing in enable_language().
include(CheckLanguage)
if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS "${CUDAToolkit_BIN_DIR}/nvcc")
  set(CMAKE_CUDA_COMPILER "${CUDAToolkit_BIN_DIR}/nvcc" CACHE FILEPATH "nvcc used for sluice's .cu files")
endif()
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  # sm_90 machine code for H100/H200 and compute_75 PTX that the driver compiles on any other GPU
  # from Turing on (the oldest nvcc 13 supports). Two targets keep nvcc time low.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "90-real;75-virtual")
  endif()
  enable_language(CUDA)
  set(SLUICE_HAS_NVCC ON CACHE INTERNAL "nvcc can compile sluice's .cu files")
  message(STATUS "sluice: nvcc ${CMAKE_CUDA_COMPILER_VERSION} enabled for .cu files (architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "sluice: no nvcc; sluice's .cu tests and benchmarks are skipped")
endif()

function(sluice_cuda_sources target)
  target_link_libraries(${target} PRIVATE sluice::cuda)
  # sluice::cuda links the shared runtime (CUDA::cudart); nvcc targets would add the static one
  # too. One runtime per process: use the shared one everywhere.
  # CMake gives CXX targets a run path to libcudart but not CUDA-language ones: add it, so the
  # executables start on machines whose loader does not know the toolkit's lib directory.
  set_target_properties(${target} PROPERTIES CUDA_RUNTIME_LIBRARY Shared BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR}")
  # Last -std wins for nvcc, so this overrides whatever CMake chose.
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20 --expt-relaxed-constexpr -Xcompiler=-Wall>)
endfunction()

# SLUICE_GPU_CHECKS: the device tests and GPU benchmarks without the rest of the suite, for a GPU
# machine that has the CUDA toolkit but maybe no test or benchmark library (bench/gpu_check.sh).
# Added here, before sluice_dev_flags exists: these builds go without the warning flags.
if(SLUICE_GPU_CHECKS)
  enable_testing()
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/cuda/device ${PROJECT_BINARY_DIR}/gpu_checks/tests)
  add_subdirectory(${PROJECT_SOURCE_DIR}/bench/gpu ${PROJECT_BINARY_DIR}/gpu_checks/bench)
endif()
