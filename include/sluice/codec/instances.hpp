// sluice/codec/instances.hpp — instance masks that follow an image: COCO's polygons and
// run-length masks, drawn through the image's transform, one mask for each box that survives it.
//
// instance_masks<"segmentation", "boxes"> follows the image of decode<"image">(codec,
// boxes<"boxes", ...>{}, instance_masks<"segmentation", "boxes">{}): each instance whose box the
// boxes follower keeps is drawn at the source size (a pixel is in a polygon when its centre is;
// run lengths column-major, as COCO stores them) and resampled nearest-neighbour through the
// image's transform. The field becomes u8 {kept, out_h, out_w} of 0 and 1, mask k for box k:
// one decision drops a box and its mask. The field it reads holds instance records
// (docs/formats.md), which io::coco_dataset writes with .segmentation = true.
// Errors: records that are not whole, a count other than the boxes', a vertex that is not finite,
// or runs of another size than the image are a format_error when the stage runs, naming the file,
// the record, the field and the instance. A decode without the boxes follower named does not
// compile.
// Threads and memory: one thread_local bitmap of the source size, cleared over each instance's own
// area; nothing allocated per instance once warm. Every rule: docs/decode.md.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/codec/transform.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/fixed_string.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/stage/decode.hpp"

namespace sluice::codecs {

enum class instance_kind : std::uint32_t { none = 0, polygons = 1, runs = 2 };

// Appends instance records (the layout above) to a byte vector: what a reader calls per annotation.
class instance_writer {
 public:
  explicit instance_writer(std::vector<std::byte>& out) : out_(out) {}

  void none() { u32(static_cast<std::uint32_t>(instance_kind::none)); }
  // Polygons as COCO stores them: each a flat list x0, y0, x1, y1, ... (an even count).
  void polygons(std::span<const std::vector<float>> polys) {
    u32(static_cast<std::uint32_t>(instance_kind::polygons));
    u32(static_cast<std::uint32_t>(polys.size()));
    for (const auto& p : polys) {
      u32(static_cast<std::uint32_t>(p.size() / 2));
      append(p.data(), (p.size() / 2) * 2 * sizeof(float));
    }
  }
  void runs(std::uint32_t height, std::uint32_t width, std::span<const std::uint32_t> counts) {
    u32(static_cast<std::uint32_t>(instance_kind::runs));
    u32(height);
    u32(width);
    u32(static_cast<std::uint32_t>(counts.size()));
    append(counts.data(), counts.size_bytes());
  }

 private:
  void u32(std::uint32_t v) { append(&v, sizeof v); }
  void append(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  std::vector<std::byte>& out_;
};

// COCO's compressed run-length string (pycocotools' "counts" of an RLE object) as its counts: each
// count is a little-endian run of 5-bit groups in characters from '0' (48), 0x20 set on every
// group but the last, the last group's 0x10 its sign; from the fourth count on, a count is stored
// as its difference from the count two before. A character outside '0'..'o', a string that ends
// inside a count, or a count below 0 is a format_error (named by the caller).
inline std::vector<std::uint32_t> coco_rle_counts(std::string_view s) {
  std::vector<std::uint32_t> counts;
  std::vector<std::int64_t> v;
  std::size_t p = 0;
  while (p < s.size()) {
    std::int64_t x = 0;
    int shift = 0;
    bool more = true;
    while (more) {
      if (p >= s.size()) throw format_error("<rle>", {}, "a compressed RLE string ends inside a count");
      const int c = static_cast<unsigned char>(s[p]) - 48;
      if (c < 0 || c > 63) throw format_error("<rle>", {}, "a compressed RLE string holds a character outside '0'..'o'");
      if (shift > 55) throw format_error("<rle>", {}, "a compressed RLE count is too long");
      x |= static_cast<std::int64_t>(c & 0x1f) << shift;
      more = (c & 0x20) != 0;
      shift += 5;
      ++p;
      if (!more && (c & 0x10) != 0) x -= std::int64_t{1} << shift;  // the sign: extend it
    }
    if (v.size() > 2) x += v[v.size() - 2];
    if (x < 0 || x > 0xffffffffLL)
      throw format_error("<rle>", {}, "a compressed RLE count of " + std::to_string(x) + " (counts are 0 or more)");
    v.push_back(x);
    counts.push_back(static_cast<std::uint32_t>(x));
  }
  return counts;
}

namespace detail {

[[noreturn]] inline void instances_fail(const std::string& why) { throw format_error("<instances>", {}, why); }

// A cursor over a field's bytes: reads what is there, or says the records are not whole.
struct instance_cursor {
  std::span<const std::byte> in;
  std::size_t p = 0;
  std::uint32_t u32() {
    if (in.size() - p < 4) instances_fail("the instance records end inside a record (" + std::to_string(in.size()) + " bytes)");
    std::uint32_t v;
    std::memcpy(&v, in.data() + p, 4);
    p += 4;
    return v;
  }
  std::span<const std::byte> take(std::size_t values) {
    if (values > (in.size() - p) / 4)
      instances_fail("the instance records end inside a record (" + std::to_string(values) + " values announced, " +
                     std::to_string((in.size() - p) / 4) + " left)");
    const auto s = in.subspan(p, values * 4);
    p += values * 4;
    return s;
  }
};

// One instance record: its kind and its values (vertices or counts), not yet checked.
struct instance_record {
  instance_kind kind = instance_kind::none;
  std::uint32_t height = 0, width = 0, polygons = 0;
  std::span<const std::byte> body;  // kind 1: the polygons (vertex counts and vertices); kind 2: the counts
};

inline instance_record next_instance(instance_cursor& c) {
  instance_record r;
  const std::uint32_t kind = c.u32();
  if (kind > 2) instances_fail("an instance record of kind " + std::to_string(kind) + " (0 none, 1 polygons, 2 runs)");
  r.kind = static_cast<instance_kind>(kind);
  if (r.kind == instance_kind::polygons) {
    r.polygons = c.u32();
    const std::size_t from = c.p;
    for (std::uint32_t k = 0; k < r.polygons; ++k) {
      const std::uint32_t n = c.u32();
      (void)c.take(2 * static_cast<std::size_t>(n));
    }
    r.body = c.in.subspan(from, c.p - from);
  } else if (r.kind == instance_kind::runs) {
    r.height = c.u32();
    r.width = c.u32();
    r.body = c.take(c.u32());
  }
  return r;
}

// Checks one record against the image (src_w × src_h): finite vertices; runs of the image's size
// that sum to it.
inline void check_instance(const instance_record& r, int src_w, int src_h) {
  if (r.kind == instance_kind::polygons) {
    instance_cursor c{r.body};
    for (std::uint32_t k = 0; k < r.polygons; ++k) {
      const auto v = c.take(2 * static_cast<std::size_t>(c.u32()));
      for (std::size_t i = 0; i < v.size(); i += 4) {
        float f;
        std::memcpy(&f, v.data() + i, 4);
        if (!std::isfinite(f)) instances_fail("a polygon vertex that is not a finite number");
      }
    }
  } else if (r.kind == instance_kind::runs) {
    if (r.width != static_cast<std::uint32_t>(src_w) || r.height != static_cast<std::uint32_t>(src_h))
      instances_fail("a run-length mask of " + std::to_string(r.width) + "x" + std::to_string(r.height) +
                     " but the image is " + std::to_string(src_w) + "x" + std::to_string(src_h) +
                     " (a mask must be the size of its image)");
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < r.body.size(); i += 4) {
      std::uint32_t n;
      std::memcpy(&n, r.body.data() + i, 4);
      sum += n;
    }
    const std::uint64_t area = std::uint64_t{r.width} * r.height;
    if (sum != area)
      instances_fail("run-length counts that sum to " + std::to_string(sum) + " pixels where the mask has " +
                     std::to_string(area));
  }
}

// The source rows [y0, y1) and columns [x0, x1) a drawn instance touched (empty: y0 >= y1).
struct drawn_area {
  int x0 = 1 << 30, y0 = 1 << 30, x1 = 0, y1 = 0;
  void add(int xa, int xb, int y) noexcept {
    x0 = std::min(x0, xa), x1 = std::max(x1, xb), y0 = std::min(y0, y), y1 = std::max(y1, y + 1);
  }
};

// Fills the pixels of `bits` (w × h, rows) whose centres lie inside polygon v (x, y pairs) by the
// even-odd rule, setting them to 1 (so several polygons give their union). Edges are swept by row
// (each enters the active list at its top row and leaves after its bottom one), so a polygon of
// many vertices costs its edges once plus the crossings of each row, not edges × rows.
struct polygon_edge {
  double ylo, yhi, ax, ay, bx, by;
};
inline void fill_polygon(std::span<const std::byte> v, std::uint8_t* bits, int w, int h, std::vector<double>& xs,
                         std::vector<polygon_edge>& edges, std::vector<std::size_t>& active, drawn_area& area) {
  const std::size_t n = v.size() / 8;
  if (n < 3) return;
  auto at = [&](std::size_t i, int c) {
    float f;
    std::memcpy(&f, v.data() + 8 * i + 4 * static_cast<std::size_t>(c), 4);
    return static_cast<double>(f);
  };
  edges.clear();
  for (std::size_t i = 0, j = n - 1; i < n; j = i++) {
    const double ay = at(j, 1), by = at(i, 1);
    if (ay == by) continue;  // horizontal: crosses no row's centre line
    edges.push_back({std::min(ay, by), std::max(ay, by), at(j, 0), ay, at(i, 0), by});
  }
  if (edges.empty()) return;
  std::sort(edges.begin(), edges.end(), [](const polygon_edge& a, const polygon_edge& b) { return a.ylo < b.ylo; });
  double hi = edges[0].yhi;
  for (const auto& e : edges) hi = std::max(hi, e.yhi);
  // Rows whose centre y + 0.5 lies in [ylo, hi), clamped as doubles first (a vertex may be huge).
  const double first = std::max(0.0, std::ceil(edges[0].ylo - 0.5));
  const double last = std::min(static_cast<double>(h) - 1, std::ceil(hi - 0.5) - 1);
  if (!(first <= last)) return;
  active.clear();
  std::size_t next = 0;
  for (int y = static_cast<int>(first), y1 = static_cast<int>(last); y <= y1; ++y) {
    const double yc = y + 0.5;
    while (next < edges.size() && edges[next].ylo <= yc) active.push_back(next++);
    // an edge crosses this row's centre line when ylo <= yc < yhi
    active.erase(std::remove_if(active.begin(), active.end(), [&](std::size_t e) { return edges[e].yhi <= yc; }),
                 active.end());
    xs.clear();
    for (const std::size_t k : active) {
      const polygon_edge& e = edges[k];
      xs.push_back(e.ax + (yc - e.ay) * (e.bx - e.ax) / (e.by - e.ay));
    }
    std::sort(xs.begin(), xs.end());
    std::uint8_t* row = bits + static_cast<std::size_t>(y) * static_cast<std::size_t>(w);
    for (std::size_t k = 0; k + 1 < xs.size(); k += 2) {
      // pixels whose centre x + 0.5 lies in [xs[k], xs[k + 1])
      const double a = std::max(0.0, std::ceil(xs[k] - 0.5)), b = std::min(static_cast<double>(w), std::ceil(xs[k + 1] - 0.5));
      if (a < b) {
        std::fill(row + static_cast<std::ptrdiff_t>(a), row + static_cast<std::ptrdiff_t>(b), std::uint8_t{1});
        area.add(static_cast<int>(a), static_cast<int>(b), y);
      }
    }
  }
}

// Draws one checked record at the source size into bits (w × h, all 0), widening `area` by what it
// touched (so a caller that clears `area` afterwards leaves bits all 0, even if this throws).
inline void draw_instance(const instance_record& r, std::uint8_t* bits, int w, int h, drawn_area& area) {
  if (r.kind == instance_kind::polygons) {
    thread_local std::vector<double> xs;
    thread_local std::vector<polygon_edge> edges;
    thread_local std::vector<std::size_t> active;
    instance_cursor c{r.body};
    for (std::uint32_t k = 0; k < r.polygons; ++k)
      fill_polygon(c.take(2 * static_cast<std::size_t>(c.u32())), bits, w, h, xs, edges, active, area);
  } else if (r.kind == instance_kind::runs) {    // column-major: pixel index i is (x = i / h, y = i % h); runs alternate 0s and 1s, 0s first
    std::size_t i = 0;
    bool one = false;
    for (std::size_t k = 0; k < r.body.size(); k += 4, one = !one) {
      std::uint32_t n;
      std::memcpy(&n, r.body.data() + k, 4);
      if (one && n > 0) {
        const int xa = static_cast<int>(i / static_cast<std::size_t>(h));
        const int xb = static_cast<int>((i + n - 1) / static_cast<std::size_t>(h)) + 1;
        area.add(xa, xb, xa == xb - 1 ? static_cast<int>(i % static_cast<std::size_t>(h)) : 0);
        area.add(xa, xb, xa == xb - 1 ? static_cast<int>((i + n - 1) % static_cast<std::size_t>(h)) : h - 1);
        for (std::size_t e = i + n; i < e; ++i)
          bits[(i % static_cast<std::size_t>(h)) * static_cast<std::size_t>(w) + i / static_cast<std::size_t>(h)] = 1;
      } else {
        i += n;
      }
    }
  }
}

// The thread's drawing bitmap: all 0 between draws (draw_instances clears what each instance drew).
inline std::vector<std::uint8_t>& instance_bits() {
  thread_local std::vector<std::uint8_t> bits;
  return bits;
}

}  // namespace detail

// Checks a field of instance records against the image (t's source size) and the count of its
// boxes; a format_error saying what is wrong (the decode stage names the file, record and field).
inline void check_instances(std::span<const std::byte> in, const image_transform& t, std::size_t boxes) {
  if (in.empty() && boxes > 0)
    detail::instances_fail("no instance records for " + std::to_string(boxes) +
                           " boxes (io::coco_dataset reads them with .segmentation = true)");
  detail::instance_cursor c{in};
  std::size_t n = 0;
  while (c.p < in.size()) {
    try {
      detail::check_instance(detail::next_instance(c), t.src_width, t.src_height);
    } catch (const format_error& e) {
      detail::instances_fail("instance " + std::to_string(n) + ": " + e.cause());
    }
    ++n;
  }
  if (n != boxes)
    detail::instances_fail(std::to_string(n) + " instance records for " + std::to_string(boxes) +
                           " boxes (one a box, in the boxes' order)");
}

// Draws instances `keep` (indices of the records, rising) of a checked field through t into out:
// keep.size() masks of t.out_height × t.out_width bytes, 1 inside the instance, else 0.
inline void draw_instances(std::span<const std::byte> in, std::span<std::byte> out, const image_transform& t,
                           std::span<const std::uint32_t> keep) {
  const std::size_t plane = static_cast<std::size_t>(t.out_width) * static_cast<std::size_t>(t.out_height);
  if (out.size() < plane * keep.size()) throw usage_error("sluice: draw_instances destination is smaller than its masks");
  // All 0 between calls: each instance clears what it drew (rows and columns it touched), so a
  // small object in a large image costs its own area, not the image's.
  std::vector<std::uint8_t>& bits = detail::instance_bits();
  const std::size_t w = static_cast<std::size_t>(t.src_width);
  if (bits.size() < w * static_cast<std::size_t>(t.src_height)) bits.resize(w * static_cast<std::size_t>(t.src_height));
  detail::instance_cursor c{in};
  std::size_t k = 0;
  for (std::uint32_t i = 0; k < keep.size() && c.p < in.size(); ++i) {
    const detail::instance_record r = detail::next_instance(c);
    if (keep[k] != i) continue;
    detail::check_instance(r, t.src_width, t.src_height);  // never draw past the bitmap
    detail::drawn_area a;
    struct clear_after {  // what was drawn is cleared on every way out, an exception included
      std::vector<std::uint8_t>& bits;
      const detail::drawn_area& a;
      std::size_t w;
      ~clear_after() {
        for (int y = a.y0; y < a.y1; ++y)
          std::fill_n(bits.data() + static_cast<std::size_t>(y) * w + static_cast<std::size_t>(a.x0),
                      static_cast<std::size_t>(a.x1 - a.x0), std::uint8_t{0});
      }
    } clear{bits, a, w};
    detail::draw_instance(r, bits.data(), t.src_width, t.src_height, a);
    resample_nearest(bits.data(), t.src_width, t.src_height, w, out.subspan(k * plane, plane), t, 0, {a.y0, a.y1});
    ++k;
  }
  if (k != keep.size()) throw usage_error("sluice: draw_instances asked for an instance the field does not hold");
}

}  // namespace sluice::codecs

namespace sluice {

// instance_masks<"segmentation", "boxes">{}: field "segmentation" (instance records, above) follows
// the image of decode<"img">(codec, boxes<"boxes", ...>{}, instance_masks<"segmentation", "boxes">{})
// — a rendered follower (stage/decode.hpp) drawn for the rows of "boxes" that its boxes follower
// keeps: the sample's field becomes u8 {kept, out_h, out_w}.
template <fixed_string Field, fixed_string Boxes>
struct instance_masks {
  using follower_concept = rendered_follower_tag;
  using value_type = std::uint8_t;
  static constexpr auto field = Field;
  static constexpr auto instances_of = Boxes;  // the coordinates field whose kept rows these follow
  static constexpr extent field_extent = extent::variable;
  template <fixed_string N>
  static constexpr bool carries = N == Field;

  [[nodiscard]] std::size_t output_bytes(const codecs::image_transform& t, std::size_t kept) const noexcept {
    return kept * static_cast<std::size_t>(t.out_width) * static_cast<std::size_t>(t.out_height);
  }
  [[nodiscard]] field_geometry geometry(const codecs::image_transform& t, std::size_t kept) const noexcept {
    field_geometry g{.ndim = 3};
    g.shape[0] = static_cast<std::int64_t>(kept);
    g.shape[1] = t.out_height;
    g.shape[2] = t.out_width;
    return g;
  }
  void check(std::span<const std::byte> in, const codecs::image_transform& t, std::size_t boxes) const {
    codecs::check_instances(in, t, boxes);
  }
  void render(std::span<const std::byte> in, std::span<std::byte> out, const codecs::image_transform& t,
              std::span<const std::uint32_t> keep) const {
    codecs::draw_instances(in, out, t, keep);
  }
};

}  // namespace sluice
