// A minimal test harness for the device tests: they must build on a GPU machine that has the CUDA
// toolkit but no test library. Include it in exactly one source file of an executable.
//
//   GPU_TEST("normalize matches the host") { CHECK(a == b); REQUIRE(ok); }
//
// The executable probes the device first. Without one (any cudaGetDeviceCount error counts) it
// prints "SKIPPED: <reason>" and exits with 77, which ctest reports as Skipped (SKIP_RETURN_CODE);
// it never passes without running. A failed CHECK prints file:line and the expression and the run
// fails (exit 1); REQUIRE also ends the test case. A CUDA error thrown by a test fails it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "sluice/cuda/runtime.hpp"

namespace gpu_test {

struct test_case {
  const char* name;
  void (*fn)();
};
inline std::vector<test_case>& registry() {
  static std::vector<test_case> r;
  return r;
}
inline int& failures() {
  static int f = 0;
  return f;
}
struct require_failed {};
struct registrar {
  registrar(const char* name, void (*fn)()) { registry().push_back({name, fn}); }
};
inline void fail(const char* file, int line, const char* expr, bool fatal) {
  ++failures();
  std::printf("  FAILED %s:%d: %s\n", file, line, expr);
  if (fatal) throw require_failed{};
}

// Device memory for a test, freed at scope exit.
struct device_buffer {
  void* p = nullptr;
  explicit device_buffer(std::size_t bytes) {
    sluice::cuda::check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
  }
  ~device_buffer() { cudaFree(p); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  template <class T>
  T* as(std::size_t offset_elems = 0) const {
    return static_cast<T*>(p) + offset_elems;
  }
};

}  // namespace gpu_test

#define GPU_TEST_CAT2(a, b) a##b
#define GPU_TEST_CAT(a, b) GPU_TEST_CAT2(a, b)
#define GPU_TEST_IMPL(fn, name)                                                 \
  static void fn();                                                             \
  static const gpu_test::registrar GPU_TEST_CAT(fn, _reg){name, &fn};           \
  static void fn()
#define GPU_TEST(name) GPU_TEST_IMPL(GPU_TEST_CAT(gpu_test_case_, __LINE__), name)
#define CHECK(...) \
  ((__VA_ARGS__) ? (void)0 : gpu_test::fail(__FILE__, __LINE__, #__VA_ARGS__, false))
#define REQUIRE(...) \
  ((__VA_ARGS__) ? (void)0 : gpu_test::fail(__FILE__, __LINE__, #__VA_ARGS__, true))
#define MESSAGE(...) (std::printf("  note: "), std::printf(__VA_ARGS__), std::printf("\n"))

int main(int argc, char** argv) {
  const auto probe = sluice::cuda::probe_device();
  if (!probe.available) {
    std::printf("SKIPPED: %s\n", probe.reason.c_str());
    return 77;
  }
  std::printf("device: %s\n", probe.reason.c_str());
  const std::string only = argc > 1 ? argv[1] : "";
  int ran = 0, failed_cases = 0;
  for (const auto& t : gpu_test::registry()) {
    if (!only.empty() && std::string(t.name).find(only) == std::string::npos) continue;
    const int before = gpu_test::failures();
    const auto t0 = std::chrono::steady_clock::now();
    std::printf("[ RUN  ] %s\n", t.name);
    std::fflush(stdout);
    try {
      t.fn();
    } catch (const gpu_test::require_failed&) {
    } catch (const std::exception& e) {
      ++gpu_test::failures();
      std::printf("  FAILED: exception: %s\n", e.what());
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const bool ok = gpu_test::failures() == before;
    failed_cases += ok ? 0 : 1;
    ++ran;
    std::printf("[ %s ] %s (%.1f ms)\n", ok ? " OK " : "FAIL", t.name, ms);
    std::fflush(stdout);
  }
  std::printf("%d test cases, %d failed\n", ran, failed_cases);
  if (ran == 0) {
    std::printf("no test case matched '%s'\n", only.c_str());
    return 1;
  }
  return failed_cases == 0 ? 0 : 1;
}
