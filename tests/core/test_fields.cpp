// Samples with fields: per-field collate (stack, normalize, pad, pack, ragged), the batch's
// tensors, bad input naming the field, determinism for any worker count.
#include <doctest/doctest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "sluice/sluice.hpp"
#include "test_util.hpp"

using sluice_test::nested_text;

using namespace sluice;

namespace {

// A detection-like dataset in memory: sample i has a 4x4x3 u8 image, i % 5 boxes (4 floats each),
// one class per box and a label.
using det_schema = schema<field<"image", std::uint8_t>, field<"boxes", float, variable>,
                          field<"classes", std::int64_t, variable>, field<"label", std::int64_t>>;
struct det_reader {
  using reader_concept = reader_tag;
  std::size_t n;
  std::vector<std::vector<std::uint8_t>> images;
  std::vector<std::vector<float>> boxes;
  std::vector<std::vector<std::int64_t>> classes;
  std::vector<std::int64_t> labels;
  std::size_t bad = ~std::size_t{0};  // this record's boxes have 3 floats too many
  explicit det_reader(std::size_t count) : n(count), images(count), boxes(count), classes(count), labels(count) {
    for (std::size_t i = 0; i < n; ++i) {
      images[i].resize(48);
      for (std::size_t j = 0; j < 48; ++j) images[i][j] = static_cast<std::uint8_t>(i * 7 + j);
      for (std::size_t b = 0; b < i % 5; ++b) {
        for (std::size_t k = 0; k < 4; ++k) boxes[i].push_back(static_cast<float>(i) + 0.25f * static_cast<float>(k));
        classes[i].push_back(static_cast<std::int64_t>(i * 10 + b));
      }
      labels[i] = static_cast<std::int64_t>(i % 3);
    }
  }
  std::size_t size() const { return n; }
  std::string_view path() const { return "det.mem"; }
  fields_sample<det_schema> fields(std::size_t i) const {
    fields_sample<det_schema> s{.id = i, .origin = path()};
    s.set<"image">(images[i]);
    std::span<const float> bx(boxes[i]);
    if (i == bad) bx = std::span<const float>(boxes[i].data(), boxes[i].size() + 3);
    s.set<"boxes">(bx);
    s.set<"classes">(classes[i]);
    s.set<"label">(std::span<const std::int64_t>(&labels[i], 1));
    return s;
  }
};

// Token documents in memory: document i is i % 7 + 1 tokens, token j of it = 1000 * i + j.
using tok_schema = schema<field<"tokens", std::uint16_t, variable>>;
struct tok_reader {
  using reader_concept = reader_tag;
  std::vector<std::vector<std::uint16_t>> docs;
  explicit tok_reader(std::size_t n, std::size_t mod = 7) : docs(n) {
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < i % mod + 1; ++j) docs[i].push_back(static_cast<std::uint16_t>(1000 * i + j));
  }
  std::size_t size() const { return docs.size(); }
  std::string_view path() const { return "tokens.mem"; }
  fields_sample<tok_schema> fields(std::size_t i) const {
    fields_sample<tok_schema> s{.id = i, .origin = path()};
    s.set<"tokens">(docs[i]);
    return s;
  }
};

template <class T>
std::vector<T> values(const tensor_view& v) {
  auto s = v.as<T>();
  return {s.begin(), s.end()};
}

std::uint64_t hash_batch(const batch& b, std::uint64_t h) {
  for (std::size_t t = 0; t < b.tensor_count(); ++t) {
    auto v = b.tensor(t);
    for (auto d : v.shape()) h = (h ^ static_cast<std::uint64_t>(d)) * 1099511628211ull;
    for (auto x : v.bytes()) h = (h ^ static_cast<std::uint8_t>(x)) * 1099511628211ull;
  }
  return h;
}


}  // namespace

TEST_CASE("fields: stack, ragged and the label tensor, typed and by name") {
  det_reader r(23);
  auto loader = from(sample::sequential(r.size())) | read(r) |
                collate({.batch = 8}, stack<"image">{.shape = {4, 4, 3}}, ragged<"boxes">{.row = {4}},
                        ragged<"classes">{}, stack<"label">{}) |
                prefetch(2, {.workers = 2});
  std::size_t seen = 0;
  for (auto& b : loader.epoch(0)) {
    const std::size_t n = b.size();
    auto img = b.get<"image">();
    static_assert(std::is_same_v<decltype(img)::value_type, std::uint8_t>);
    REQUIRE(img.shape().size() == 4);
    CHECK(img.shape()[0] == static_cast<std::int64_t>(n));
    CHECK(img.shape()[1] == 4);
    CHECK(img.shape()[3] == 3);
    auto boxes = b.get<"boxes">();
    static_assert(std::is_same_v<decltype(boxes)::value_type, float>);
    auto off = b.get<"boxes.offsets">();
    CHECK(off.shape()[0] == static_cast<std::int64_t>(n + 1));
    CHECK(boxes.shape()[1] == 4);
    CHECK(boxes.shape()[0] == off[n]);
    auto cls = b.get<"classes">();
    auto coff = b.get<"classes.offsets">();
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t id = b.ids()[i];
      CHECK(std::memcmp(img.data() + i * 48, r.images[id].data(), 48) == 0);
      CHECK(off[i + 1] - off[i] == static_cast<std::int64_t>(id % 5));
      for (std::size_t k = 0; k < r.boxes[id].size(); ++k) CHECK(boxes[static_cast<std::size_t>(off[i]) * 4 + k] == r.boxes[id][k]);
      for (std::size_t k = 0; k < r.classes[id].size(); ++k) CHECK(cls[static_cast<std::size_t>(coff[i]) + k] == r.classes[id][k]);
      CHECK(b.labels()[i] == r.labels[id]);
    }
    // rows_of: sample i's part of a ragged field, typed, by name or at run time.
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t id = b.ids()[i];
      const auto bx = b.rows_of<"boxes">(i);
      static_assert(std::is_same_v<decltype(bx), const std::span<const float>>);
      CHECK(std::vector<float>(bx.begin(), bx.end()) == r.boxes[id]);
      const auto cl = b.rows_of<std::int64_t>("classes", i);
      CHECK(std::vector<std::int64_t>(cl.begin(), cl.end()) == r.classes[id]);
    }
    CHECK_THROWS_AS((void)b.rows_of<"boxes">(n), usage_error);                // not a sample of the batch
    CHECK_THROWS_AS((void)b.rows_of<float>("image", 0), usage_error);         // no "image.offsets"
    CHECK_THROWS_AS((void)b.rows_of<std::int32_t>("classes", 0), usage_error);  // not its dtype
    // The same tensors by name at run time, with their dtypes.
    CHECK(b.field("boxes").type() == dtype::f32);
    CHECK(b.field("classes.offsets").type() == dtype::i64);
    CHECK(b.field("label").shape().size() == 1);
    CHECK_THROWS_AS((void)b.field("imgae"), usage_error);
    CHECK_THROWS_AS((void)b.field("image").as<float>(), usage_error);
    seen += n;
  }
  CHECK(seen == 23);
}

TEST_CASE("fields: collate({...}) alone stacks every field of a fixed schema") {
  using s2 = schema<field<"x", float>, field<"y", std::int32_t>>;
  struct reader {
    using reader_concept = reader_tag;
    std::vector<float> x = std::vector<float>(30);
    std::vector<std::int32_t> y = std::vector<std::int32_t>(10);
    reader() {
      std::iota(x.begin(), x.end(), 0.f);
      std::iota(y.begin(), y.end(), 100);
    }
    std::size_t size() const { return 10; }
    std::string_view path() const { return "xy"; }
    fields_sample<s2> fields(std::size_t i) const {
      fields_sample<s2> s{.id = i, .origin = "xy"};
      s.set<"x">(std::span<const float>(x.data() + 3 * i, 3));
      s.set<"y">(std::span<const std::int32_t>(y.data() + i, 1));
      return s;
    }
  } r;
  auto loader = from(sample::sequential(10)) | read(r) | collate({.batch = 4}) | prefetch(2);
  std::vector<float> xs;
  std::vector<std::int32_t> ys;
  for (auto& b : loader.epoch(0)) {
    auto x = b.get<"x">();
    CHECK(x.shape()[1] == 3);
    xs.insert(xs.end(), x.values().begin(), x.values().end());
    auto y = b.get<"y">();
    CHECK(y.shape().size() == 1);
    ys.insert(ys.end(), y.values().begin(), y.values().end());
  }
  CHECK(xs == r.x);
  CHECK(ys == r.y);
}

TEST_CASE("fields: pad to the longest, to a multiple, to a fixed length, lengths and mask") {
  tok_reader r(20);
  SUBCASE("longest, multiple of 4, mask") {
    auto loader = from(sample::sequential(r.size())) | read(r) |
                  collate({.batch = 6}, pad<"tokens">{.value = 50256, .multiple = 4, .mask = true}) | prefetch(2);
    for (auto& b : loader.epoch(0)) {
      auto t = b.get<"tokens">();
      auto len = b.get<"tokens.lengths">();
      auto mask = b.get<"tokens.mask">();
      std::size_t longest = 0;
      for (auto id : b.ids()) longest = std::max(longest, r.docs[id].size());
      const std::size_t L = (longest + 3) / 4 * 4;
      REQUIRE(t.shape()[1] == static_cast<std::int64_t>(L));
      for (std::size_t i = 0; i < b.size(); ++i) {
        const auto& d = r.docs[b.ids()[i]];
        CHECK(len[i] == static_cast<std::int64_t>(d.size()));
        for (std::size_t j = 0; j < L; ++j) {
          CHECK(t[i * L + j] == (j < d.size() ? d[j] : 50256));
          CHECK(mask[i * L + j] == (j < d.size()));
        }
      }
    }
  }
  SUBCASE("fixed length: longer is an error naming file, record and field; or truncated") {
    auto strict = from(sample::sequential(r.size())) | read(r) | collate({.batch = 6}, pad<"tokens">{.length = 5}) | prefetch(2);
    try {
      for (auto& b : strict.epoch(0)) (void)b;
      FAIL("a sequence past the fixed length passed");
    } catch (const stage_error& e) {
      const std::string t = nested_text(e);
      CHECK(t.find("tokens.mem") != std::string::npos);
      CHECK(t.find("record 5") != std::string::npos);
      CHECK(t.find("field 'tokens'") != std::string::npos);
    }
    auto cut = from(sample::sequential(r.size())) | read(r) | collate({.batch = 6}, pad<"tokens">{.length = 5, .truncate = true}) | prefetch(2);
    for (auto& b : cut.epoch(0)) {
      auto t = b.get<"tokens">();
      CHECK(t.shape()[1] == 5);
      for (std::size_t i = 0; i < b.size(); ++i) {
        const auto& d = r.docs[b.ids()[i]];
        CHECK(b.get<"tokens.lengths">()[i] == static_cast<std::int64_t>(std::min<std::size_t>(d.size(), 5)));
        for (std::size_t j = 0; j < 5; ++j) CHECK(t[i * 5 + j] == (j < d.size() ? d[j] : 0));
      }
    }
  }
  SUBCASE("a pad value the element type cannot hold is a usage error") {
    auto bad = from(sample::sequential(r.size())) | read(r) | collate({.batch = 6}, pad<"tokens">{.value = 70000}) | prefetch(2);
    CHECK_THROWS_WITH_AS([&] { for (auto& b : bad.epoch(0)) (void)b; }(), doctest::Contains("does not fit its element type u16"),
                         stage_error);
  }
}

namespace {
// The packing the documentation describes, written the plain way.
struct packed_ref {
  std::vector<std::int64_t> tokens, doc, pos;
  std::vector<std::int32_t> cu;
};
packed_ref pack_ref(const std::vector<std::vector<std::uint16_t>>& docs, std::size_t L, bool split, std::int64_t padv) {
  packed_ref r;
  auto pad_to = [&](std::size_t end) {
    while (r.tokens.size() < end) {
      r.tokens.push_back(padv);
      r.doc.push_back(-1);
    }
  };
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const auto& d = docs[i];
    if (!split && !d.empty() && r.tokens.size() % L + d.size() > L) pad_to((r.tokens.size() + L - 1) / L * L);
    for (auto t : d) {
      r.tokens.push_back(t);
      r.doc.push_back(static_cast<std::int64_t>(i));
    }
  }
  pad_to((r.tokens.size() + L - 1) / L * L);
  // Segments: runs of one doc id within a row.
  r.cu.push_back(0);
  for (std::size_t k = 0; k < r.tokens.size(); ++k) {
    const bool start = k % L == 0 || r.doc[k] != r.doc[k - 1];
    if (start && k != 0) r.cu.push_back(static_cast<std::int32_t>(k));
    r.pos.push_back(start ? 0 : r.pos.back() + 1);
  }
  if (!r.tokens.empty()) r.cu.push_back(static_cast<std::int32_t>(r.tokens.size()));
  return r;
}
}  // namespace

TEST_CASE("fields: pack into rows with doc ids, position ids and cu_seqlens") {
  tok_reader r(40, 13), short_docs(40, 8);
  for (bool split : {true, false}) {
    CAPTURE(split);
    const tok_reader& src = split ? r : short_docs;
    auto loader = from(sample::sequential(src.size())) | read(src) |
                  collate({.batch = 9}, pack<"tokens">{.length = 8, .split = split, .value = 7}) | prefetch(2);
    for (auto& b : loader.epoch(0)) {
      std::vector<std::vector<std::uint16_t>> docs;
      for (auto id : b.ids()) docs.push_back(src.docs[id]);
      auto ref = pack_ref(docs, 8, split, 7);
      auto t = b.get<"tokens">();
      REQUIRE(t.shape()[1] == 8);
      REQUIRE(static_cast<std::size_t>(t.numel()) == ref.tokens.size());
      for (std::size_t k = 0; k < ref.tokens.size(); ++k) {
        CHECK(t[k] == ref.tokens[k]);
        CHECK(b.get<"tokens.doc_ids">()[k] == ref.doc[k]);
        CHECK(b.get<"tokens.position_ids">()[k] == ref.pos[k]);
      }
      auto cu = b.get<"tokens.cu_seqlens">();
      CHECK(std::vector<std::int32_t>(cu.values().begin(), cu.values().end()) == ref.cu);
    }
  }
  SUBCASE("a sequence longer than a row is refused without split") {
    auto loader = from(sample::sequential(r.size())) | read(r) |
                  collate({.batch = 9}, pack<"tokens">{.length = 4, .split = false}) | prefetch(2);
    CHECK_THROWS_WITH_AS([&] { for (auto& b : loader.epoch(0)) (void)b; }(), doctest::Contains("does not fit a packed row"),
                         stage_error);
  }
}

TEST_CASE("fields: a field that does not fit its type and shape is a format_error naming it") {
  det_reader r(12);
  r.bad = 6;
  auto make = [&](on_error policy) {
    return from(sample::sequential(r.size())) | read(r) |
           collate({.batch = 4}, stack<"image">{}, ragged<"boxes">{.row = {4}}) | prefetch(2, {.errors = policy});
  };
  auto raise = make(on_error::raise);
  std::size_t delivered = 0;
  try {
    for (auto& b : raise.epoch(0)) delivered += b.size();
    FAIL("no error");
  } catch (const stage_error& e) {
    CHECK(e.sample_id() == 6);
    try {
      std::rethrow_if_nested(e);
    } catch (const format_error& f) {
      CHECK(f.file() == "det.mem");
      CHECK(f.record() == 6);
      CHECK(f.cause().find("field 'boxes'") != std::string::npos);
      CHECK(f.cause().find("whole number of rows") != std::string::npos);
    }
  }
  CHECK(delivered == 4);
  auto skip = make(on_error::skip);
  std::size_t total = 0, skipped = 0;
  for (auto& b : skip.epoch(0)) {
    total += b.size();
    skipped += b.skipped();
    for (auto id : b.ids()) CHECK(id != 6);
  }
  CHECK(total == 11);
  CHECK(skipped == 1);
}

TEST_CASE("fields: stack of differently sized samples is an error, a shape that contradicts is one too") {
  tok_reader r(10);
  using one = schema<field<"tokens", std::uint16_t>>;
  struct fixed_view {
    using reader_concept = reader_tag;
    const tok_reader* r;
    std::size_t size() const { return r->size(); }
    std::string_view path() const { return "fixed.mem"; }
    fields_sample<one> fields(std::size_t i) const {
      fields_sample<one> s{.id = i, .origin = path()};
      s.set<"tokens">(r->docs[i]);
      return s;
    }
  } v{&r};
  auto loader = from(sample::sequential(v.size())) | read(v) | collate({.batch = 4}, stack<"tokens">{}) | prefetch(2);
  CHECK_THROWS_WITH_AS([&] { for (auto& b : loader.epoch(0)) (void)b; }(), doctest::Contains("stack needs one size: samples of different sizes collate with ragged"), stage_error);
  det_reader d(4);
  auto shaped = from(sample::sequential(4)) | read(d) | collate({.batch = 4}, stack<"image">{.shape = {4, 4, 4}}) | prefetch(2);
  CHECK_THROWS_WITH_AS([&] { for (auto& b : shaped.epoch(0)) (void)b; }(), doctest::Contains("do not hold shape {4, 4, 4}"),
                       stage_error);
}

TEST_CASE("fields: normalize per channel in the input layout, or transposed in the same pass") {
  det_reader r(6);  // 4x4x3 HWC images
  const std::vector<float> mean{10.f, 20.f, 30.f}, sd{2.f, 4.f, 8.f};
  for (auto out : {image_layout::hwc, image_layout::chw}) {
    auto loader = from(sample::sequential(6)) | read(r) |
                  collate({.batch = 3}, normalized<"image">{.mean = mean, .std = sd, .scale = 1.f, .layout = image_layout::hwc,
                                                          .shape = {4, 4, 3}, .output = out}) |
                  prefetch(2);
    for (auto& b : loader.epoch(0)) {
      auto img = b.get<"image">();
      static_assert(std::is_same_v<decltype(img)::value_type, float>);
      if (out == image_layout::chw) CHECK(img.shape()[1] == 3);
      else CHECK(img.shape()[3] == 3);
      for (std::size_t i = 0; i < b.size(); ++i) {
        const auto& px = r.images[b.ids()[i]];
        // The same bits as sluice::normalize, the host reference of the device kernel.
        sluice::normalize_params p{3};
        for (int c = 0; c < 3; ++c) p.set(c, mean[c], sd[c]);
        std::vector<float> same(48);
        sluice::normalize(std::span<const std::uint8_t>(px.data(), 48), std::span<float>(same), p);
        for (std::size_t y = 0; y < 4; ++y)
          for (std::size_t x = 0; x < 4; ++x)
            for (std::size_t c = 0; c < 3; ++c) {
              const float want = (static_cast<float>(px[(y * 4 + x) * 3 + c]) - mean[c]) / sd[c];
              const std::size_t at = out == image_layout::chw ? c * 16 + y * 4 + x : (y * 4 + x) * 3 + c;
              CHECK(img[i * 48 + at] == doctest::Approx(want).epsilon(1e-6));
              CHECK(img[i * 48 + at] == same[(y * 4 + x) * 3 + c]);
            }
      }
    }
  }
  // Per-channel values without a shape and layout cannot be placed: an error, not a guess.
  auto vague = from(sample::sequential(6)) | read(r) | collate({.batch = 3}, normalized<"image">{.mean = mean, .std = sd, .scale = 1.f}) | prefetch(2);
  CHECK_THROWS_WITH_AS([&] { for (auto& b : vague.epoch(0)) (void)b; }(), doctest::Contains("shape and layout"), stage_error);
}

TEST_CASE("normalisation values on another scale than the scaled bytes are refused, naming the units") {
  // ImageNet's 0-255 mean and std, or mmcv's mean 0 / std 255, given with the default scale 1/255:
  // every pixel would come out near one value. The classic collate and the per-field one say so.
  sluice_test::mem_reader r(8, 6);
  auto classic = [&](std::vector<float> m, std::vector<float> s, float scale) {
    auto l = from(sample::sequential(8)) | read(r) |
             collate({.batch = 4, .output = dtype::f32, .scale = scale, .mean = m, .std = s, .channels = 3}) | prefetch(1);
    for (auto& b : l.epoch(0)) (void)b;
  };
  CHECK_THROWS_WITH_AS(classic({123.675f, 116.28f, 103.53f}, {58.395f, 57.12f, 57.375f}, 1.f / 255),
                       doctest::Contains(".mean[0] = 123.7 lies outside the range [0, 1] of the scaled bytes (x * scale, "
                                         "scale 0.003922): give mean and std in those units (123.7 * scale = 0.485), "
                                         "or scale = 1"),
                       usage_error);
  CHECK_THROWS_WITH_AS(classic({0.f}, {255.f}, 1.f / 255), doctest::Contains(".std[0] = 255 is wider than the whole range [0, 1]"),
                       usage_error);
  classic({123.675f, 116.28f, 103.53f}, {58.395f, 57.12f, 57.375f}, 1.f);  // the same values in the bytes' units
  classic({0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}, 1.f / 255);
  classic({0.5f}, {1.f}, 1.f / 255);  // [0, 1] to [-0.5, 0.5]: the whole range is a std
  det_reader d(6);
  auto fields = from(sample::sequential(6)) | read(d) |
                collate({.batch = 3}, normalized<"image">{.mean = {124.f, 116.f, 104.f}, .std = {0.2f}, .layout = image_layout::hwc,
                                                         .shape = {4, 4, 3}}) |
                prefetch(2);
  CHECK_THROWS_WITH_AS([&] { for (auto& b : fields.epoch(0)) (void)b; }(), doctest::Contains(".mean[0] = 124 lies outside the range [0, 1]"),
                       std::exception);
}

TEST_CASE("fields: batches are bit-identical for 1, 2 and 4 workers (variable fields, shuffled)") {
  tok_reader toks(101, 11);
  det_reader det(57);
  auto run_tok = [&](std::size_t workers) {
    auto loader = from(sample::shuffle(toks.size(), {.seed = 3})) | read(toks) |
                  collate({.batch = 7}, pack<"tokens">{.length = 16}) | prefetch(2, {.workers = workers});
    std::uint64_t h = 1469598103934665603ull;
    for (std::uint64_t e = 0; e < 2; ++e)
      for (auto& b : loader.epoch(e)) h = hash_batch(b, h);
    return h;
  };
  auto run_det = [&](std::size_t workers) {
    auto loader = from(sample::shuffle(det.size(), {.seed = 5})) | read(det) |
                  collate({.batch = 5}, stack<"image">{}, ragged<"boxes">{.row = {4}}, pad<"classes">{.value = -1, .mask = true}) |
                  prefetch(3, {.workers = workers});
    std::uint64_t h = 1469598103934665603ull;
    for (auto& b : loader.epoch(1)) h = hash_batch(b, h);
    return h;
  };
  const auto t1 = run_tok(1), d1 = run_det(1);
  for (std::size_t w : {2, 4}) {
    CHECK(run_tok(w) == t1);
    CHECK(run_det(w) == d1);
  }
}

TEST_CASE("fields: slot storage grows to the largest batch, then is reused, bytes in flight follow the batches") {
  tok_reader r(64, 32);  // documents of 1..32 tokens: every batch pads to its own longest
  auto loader = from(sample::sequential(r.size())) | read(r) | collate({.batch = 8}, pad<"tokens">{}) | prefetch(1, {.workers = 1});
  std::size_t largest_batch = 0, after_first = 0;
  for (std::uint64_t e = 0; e < 3; ++e) {
    for (auto& b : loader.epoch(e)) {
      CHECK(b.get<"tokens">().shape()[0] == static_cast<std::int64_t>(b.size()));
      largest_batch = std::max(largest_batch, b.slot().used_bytes);
      CHECK(b.slot().used_bytes <= b.slot().storage_bytes);
      CHECK(loader.stats().bytes_in_flight >= b.slot().used_bytes);  // the held batch counts
    }
    if (e == 0) after_first = loader.stats().batch_bytes;
  }
  auto st = loader.stats();
  CHECK(st.batch_bytes >= largest_batch);   // the largest slot holds the largest batch
  CHECK(st.batch_bytes == after_first);     // and later epochs grew nothing
  CHECK(st.bytes_in_flight == 0);
  CHECK(st.samples == 3 * 64);
}
