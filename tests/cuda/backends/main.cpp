// tests/cuda/backends: one program, one translation unit per backend (host_tu.cpp, cudart_tu.cpp).
// Passes when each unit kept its own definitions: distinct stage types, and each probe answering
// for its own build. Needs the CUDA toolkit to build, no device to run.
#include <cstdio>
#include <string>

std::string host_to_device_type();
std::string host_probe();
std::size_t host_pin_batches();
std::string cudart_to_device_type();
std::string cudart_probe();

int main() {
  int failed = 0;
  auto check = [&](bool ok, const char* what, const std::string& a, const std::string& b) {
    if (!ok) {
      std::printf("FAILED: %s\n  host:   %s\n  cudart: %s\n", what, a.c_str(), b.c_str());
      ++failed;
    }
  };
  // Without the key both units name the one class sluice::to_device_stage (N6sluice15to_device_stageE).
  const std::string ht = host_to_device_type(), ct = cudart_to_device_type();
  check(ht != ct, "to_device_stage is one type in both units", ht, ct);
  check(ht.find("backend_host") != std::string::npos && ct.find("backend_cudart") != std::string::npos,
        "to_device_stage does not name its backend", ht, ct);
  const std::string hp = host_probe(), cp = cudart_probe();
  const bool host_says_no_runtime = hp.find("built without the CUDA runtime") != std::string::npos;
  const bool cudart_asked_runtime = cp.find("built without the CUDA runtime") == std::string::npos;
  check(host_says_no_runtime && cudart_asked_runtime, "a unit's probe_device answered for the other build", hp, cp);
  check(host_pin_batches() == 0, "the host unit's pin() is not its own", "", "");
  if (failed == 0) std::printf("ok: host [%s] [%s]; cudart [%s] [%s]\n", ht.c_str(), hp.c_str(), ct.c_str(), cp.c_str());
  return failed == 0 ? 0 : 1;
}
