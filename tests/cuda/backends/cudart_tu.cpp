// tests/cuda/backends: built WITH the CUDA runtime (links sluice::cuda); see host_tu.cpp. Nothing
// here needs a device: the types are named and the probe is asked, that is all.
#include <string>
#include <typeinfo>

#include "sluice/cuda/runtime.hpp"
#include "sluice/stage/pin.hpp"
#include "sluice/stage/to_device.hpp"

static_assert(SLUICE_HAS_CUDART(), "cudart_tu.cpp must be built with SLUICE_WITH_CUDA and the CUDA headers");

std::string cudart_to_device_type() { return typeid(decltype(sluice::to_device())).name(); }
std::string cudart_probe() { return sluice::cuda::probe_device().reason; }
