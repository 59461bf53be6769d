// Token types that must not compile; tests/tokens/CMakeLists.txt compiles this with one -D at a
// time and checks the diagnostic. With no -D it must compile (the control).
#include <sluice/io/tokens.hpp>
#include <sluice/stage/convert.hpp>

#include <cstdint>
#include <vector>

int main() {
#if defined(WINDOWS_U8)
  sluice::io::token_windows<std::uint8_t> w{"x.bin"};
#elif defined(WINDOWS_I32)
  sluice::io::token_windows<std::int32_t> w{"x.bin"};
#elif defined(DOCUMENTS_U64)
  sluice::io::token_documents<std::uint64_t> d{"x.bin", "x.idx"};
#elif defined(CONVERT_NARROWING)
  sluice::io::token_windows<std::uint32_t> w{"x.bin"};
  auto c = sluice::convert<"input", std::int32_t>()(w.fields(0), sluice::sample_context{});
#elif defined(WRITE_FLOAT)
  sluice::io::write_token_documents<float>("x.bin", "x.idx", std::vector<std::vector<float>>{});
#else
  if (false) {
    sluice::io::token_windows<std::uint16_t> w{"x.bin"};
    sluice::io::token_documents<std::uint32_t> d{"x.bin", "x.idx"};
  }
#endif
  return 0;
}
