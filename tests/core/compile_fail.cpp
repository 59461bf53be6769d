// Pipelines that must not compile; tests/core/CMakeLists.txt compiles this with one -D at a time
// and checks the diagnostics name both stages. With no -D it must compile (the control).
#include <sluice/sluice.hpp>

#include "sluice/codec/instances.hpp"

namespace {
struct mem_reader {
  using reader_concept = sluice::reader_tag;
  std::size_t size() const { return 1; }
  std::span<const std::byte> record(std::size_t) const { return {}; }
  std::int64_t label(std::size_t) const { return 0; }
  std::string_view path() const { return "mem"; }
};
// A stand-in decoder stage that, like the real one, takes records only.
struct decode_stage {
  using stage_concept = sluice::sample_stage_tag;
  static constexpr std::string_view name = "decode";
  sluice::record_view operator()(sluice::record_view r, const sluice::sample_context&) const { return r; }
};
// A reader of samples with fields: an image and a label.
using img_schema = sluice::schema<sluice::field<"image", std::uint8_t>, sluice::field<"label", std::int64_t>,
                                  sluice::field<"boxes", float, sluice::variable>>;
struct field_reader {
  using reader_concept = sluice::reader_tag;
  std::size_t size() const { return 1; }
  std::string_view path() const { return "mem"; }
  sluice::fields_sample<img_schema> fields(std::size_t) const { return {}; }
};
// A stand-in image codec that can plan a transform (what followers need).
struct plan_codec {
  using codec_concept = sluice::codec_tag;
  std::size_t output_bytes() const { return 1; }
  void decode(std::span<const std::byte>, std::span<std::byte>, const sluice::sample_context&) const {}
  sluice::codecs::image_transform plan(std::span<const std::byte>, const sluice::sample_context&) const { return {}; }
  void decode_with(std::span<const std::byte>, std::span<std::byte>, const sluice::codecs::image_transform&) const {}
};
struct pin_stage {
  using stage_concept = sluice::batch_stage_tag;
  static constexpr std::string_view name = "pin";
  static constexpr sluice::hook hooks = sluice::hook::none;
};
// Batch stages whose hooks do not match what they declare (core/concepts.hpp: batch_stage).
struct misspelt_hook {  // declares on_filled, implements on_fill
  using stage_concept = sluice::batch_stage_tag;
  static constexpr std::string_view name = "misspelt";
  static constexpr sluice::hook hooks = sluice::hook::on_filled;
  void on_fill(sluice::batch_slot&, sluice::no_slot_state&) {}
};
struct wrong_signature_hook {  // on_release without the slot state
  using stage_concept = sluice::batch_stage_tag;
  static constexpr std::string_view name = "wrong";
  static constexpr sluice::hook hooks = sluice::hook::on_release;
  void on_release(sluice::batch_slot&) {}
};
struct undeclared_hooks {  // no hooks declaration at all
  using stage_concept = sluice::batch_stage_tag;
  static constexpr std::string_view name = "undeclared";
  void on_filled(sluice::batch_slot&, sluice::no_slot_state&) {}
};
// A per-sample stage whose report hook takes the wrong argument (core/concepts.hpp: sample_stage).
struct wrong_report_stage {
  using stage_concept = sluice::sample_stage_tag;
  static constexpr std::string_view name = "wrong_report";
  template <class In>
  In operator()(In in, const sluice::sample_context&) const {
    return in;
  }
  void report(std::string&) const {}
};
}  // namespace

int main() {
  mem_reader r;
  sluice::sample::sequential s{1};
#if defined(DECODE_AFTER_FROM)
  auto p = sluice::from(s) | decode_stage{};
#elif defined(BATCH_STAGE_BEFORE_COLLATE)
  auto p = sluice::from(s) | sluice::read(r) | pin_stage{};
#elif defined(SAMPLE_STAGE_AFTER_COLLATE)
  auto p = sluice::from(s) | sluice::read(r) | sluice::collate({.batch = 1}) | sluice::read(r);
#elif defined(COLLATE_IDS)
  auto p = sluice::from(s) | sluice::collate({.batch = 1});
#elif defined(PREFETCH_BEFORE_COLLATE)
  auto p = sluice::from(s) | sluice::read(r) | sluice::prefetch(2);
#elif defined(MISSPELT_BATCH_FIELD)
  field_reader fr;
  auto l = sluice::from(s) | sluice::read(fr) |
           sluice::collate({.batch = 1}, sluice::stack<"image">{}, sluice::ragged<"boxes">{.row = {4}}) | sluice::prefetch(2);
  for (auto& b : l.epoch(0)) (void)b.get<"imgae">();
  int p = 0;
#elif defined(MISSPELT_COLLATE_FIELD)
  field_reader fr;
  auto l = sluice::from(s) | sluice::read(fr) | sluice::collate({.batch = 1}, sluice::stack<"lable">{}) | sluice::prefetch(2);
  for (auto& b : l.epoch(0)) (void)b;
  int p = 0;
#elif defined(WRONG_FIELD_DTYPE)
  sluice::fields_sample<img_schema> smp;
  std::vector<float> px(3);
  smp.set<"image">(px);
  int p = 0;
#elif defined(INSTANCE_MASKS_WITHOUT_BOXES)
  // instance masks follow the rows a boxes follower keeps: without that follower there are none
  auto p = sluice::decode<"image">(plan_codec{}, sluice::instance_masks<"segmentation", "boxes">{});
#elif defined(MISSPELT_HOOK)
  auto p = sluice::from(s) | sluice::read(r) | sluice::collate({.batch = 1}) | misspelt_hook{} | sluice::prefetch(2);
#elif defined(HOOK_WRONG_SIGNATURE)
  auto p = sluice::from(s) | sluice::read(r) | sluice::collate({.batch = 1}) | wrong_signature_hook{} | sluice::prefetch(2);
#elif defined(UNDECLARED_HOOKS)
  auto p = sluice::from(s) | sluice::read(r) | sluice::collate({.batch = 1}) | undeclared_hooks{} | sluice::prefetch(2);
#elif defined(REPORT_WRONG_SIGNATURE)
  auto p = sluice::from(s) | sluice::read(r) | wrong_report_stage{} | sluice::collate({.batch = 1}) | sluice::prefetch(2);
#elif defined(VARIABLE_FIELD_STACKED)
  field_reader fr;
  auto l = sluice::from(s) | sluice::read(fr) | sluice::collate({.batch = 1}) | sluice::prefetch(2);
  int p = 0;
#else
  field_reader fr;
  auto l = sluice::from(s) | sluice::read(fr) |
           sluice::collate({.batch = 1}, sluice::stack<"image">{}, sluice::ragged<"boxes">{.row = {4}}) | sluice::prefetch(2);
  for (auto& b : l.epoch(0)) (void)b.get<"image">();
  auto p = sluice::from(s) | sluice::read(r) | decode_stage{} | sluice::collate({.batch = 1}) | pin_stage{} |
           sluice::prefetch(2);
  auto d = sluice::decode<"image">(plan_codec{}, sluice::boxes<"boxes">{},
                                   sluice::instance_masks<"segmentation", "boxes">{});
  (void)d;
#endif
  (void)p;
}
