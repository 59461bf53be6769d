// libFuzzer target: the tf.train.Example parser (io/tf_example.hpp) on arbitrary bytes taken as one
// record's payload. Anything but a format_error, or a parse whose views lie inside the input and
// whose fields write exactly their announced size (every byte, the same each time), is a bug;
// ASan/UBSan catch out-of-bounds access.
#include <cstdlib>
#include <vector>

#include "sluice/io/tf_example.hpp"

namespace {
using s = sluice::schema<sluice::field<"a", std::uint8_t, sluice::variable>, sluice::field<"f", float, sluice::variable>,
                         sluice::field<"i", std::int64_t, sluice::variable>, sluice::field<"n", std::int16_t, sluice::variable>,
                         sluice::field<"d", double, sluice::variable>, sluice::field<"b", bool, sluice::variable>>;
using fixed = sluice::schema<sluice::field<"f", float>, sluice::field<"i", std::uint32_t>>;

template <sluice::fixed_string N, class S>
void write_one(const S& smp, std::span<const std::byte> in) {
  const auto& f = smp.template feature<N>();
  if (!f.data.empty() && (f.data.data() < in.data() || f.data.data() + f.data.size() > in.data() + in.size())) std::abort();
  // Written twice over two fills: a byte holding the fill both times was not written (a field
  // must write exactly size_of bytes), a changed guard byte was written past the end.
  const std::size_t n = smp.template size_of<N>();
  std::vector<std::byte> a(n + 1, std::byte{0xa5}), b(n + 1, std::byte{0x5a});
  smp.template write<N>(std::span(a).first(n), sluice::sample_context{});
  smp.template write<N>(std::span(b).first(n), sluice::sample_context{});
  if (a[n] != std::byte{0xa5} || b[n] != std::byte{0x5a}) std::abort();
  for (std::size_t k = 0; k < n; ++k)
    if (a[k] != b[k]) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  try {
    const auto smp = sluice::io::tf_example_reader<s>::parse(in, "fuzz", 0, 0);
    write_one<"a">(smp, in);
    write_one<"f">(smp, in);
    write_one<"i">(smp, in);
    write_one<"n">(smp, in);
    write_one<"d">(smp, in);
    write_one<"b">(smp, in);
  } catch (const sluice::format_error&) {
  }
  try {
    const sluice::io::tf_example_reader<fixed>::counts_type want{2, 1};
    const auto smp = sluice::io::tf_example_reader<fixed>::parse(in, "fuzz", 0, sluice::file_position::npos, &want);
    if (smp.count_of<"f">() != 2 || smp.count_of<"i">() != 1) std::abort();
    write_one<"f">(smp, in);
    write_one<"i">(smp, in);
  } catch (const sluice::format_error&) {
  }
  return 0;
}
