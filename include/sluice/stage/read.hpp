// sluice/stage/read.hpp — `read(reader)`: sample id -> record view, zero copy.
//
// The first stage after the sampler in most pipelines. It asks the reader for record `id` and
// hands on a view into the reader's memory (the mapping): no byte is copied here; collate copies
// each sample once, into the batch.
//
//   auto shard = sluice::io::shard_reader{"train.sluice"};
//   auto loader = sluice::from(sampler) | sluice::read(shard) | sluice::collate({.batch = 256})
//               | sluice::prefetch(2);
//
// A file that faulted (truncated while mapped) or changed since it was opened (core/file_guard.hpp)
// is refused here for every later sample: a format_error naming it, never its zero pages.
//
// An lvalue reader is referenced (it must outlive the pipeline, like a container under a view);
// an rvalue reader is moved into the stage and owned by it. A sample id outside the reader is an
// error naming the reader's file.
//
// A reader of samples with fields (core/schema.hpp: `fields(i)` instead of `record(i)`, e.g.
// io/tokens.hpp) is read the same way; the stage then hands on its fields_sample (or, for a reader
// whose fields are known at run time, its any_sample: core/any_sample.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "sluice/core/any_sample.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/file_guard.hpp"
#include "sluice/core/schema.hpp"

namespace sluice {

// A reader whose records have named fields: fields(i) -> a field sample (views into the reader).
template <class R>
concept fields_reader = requires(const R& r, std::size_t i) {
  typename R::reader_concept;
  requires std::same_as<typename R::reader_concept, reader_tag>;
  { r.size() } -> std::convertible_to<std::size_t>;
  requires field_sample<decltype(r.fields(i))> || std::same_as<decltype(r.fields(i)), any_sample>;
  { r.path() } -> std::convertible_to<std::string_view>;
};

template <class R>
concept any_reader = record_reader<R> || fields_reader<R>;

template <any_reader Reader>
class read_stage {
 public:
  using stage_concept = sample_stage_tag;
  static constexpr std::string_view name = "read";

  explicit read_stage(const Reader& r) noexcept : reader_(&r) {}
  explicit read_stage(std::shared_ptr<const Reader> owned) noexcept
      : owned_(std::move(owned)), reader_(owned_.get()) {}

  auto operator()(sample_id id, const sample_context&) const {
    if (detail::file_registry::instance().flagged() != 0) [[unlikely]] {
      if constexpr (requires { reader_->file().throw_if_changed(); }) reader_->file().throw_if_changed();
      else detail::file_registry::instance().check_source(reader_->path());
    }
    if (id.value >= reader_->size())
      throw format_error(std::string(reader_->path()), {.record = id.value},
                         "sample id is past the last record (the file has " +
                             std::to_string(reader_->size()) + " records)");
    if constexpr (record_reader<Reader>)
      return record_view{id.value, reader_->record(static_cast<std::size_t>(id.value)),
                         reader_->label(static_cast<std::size_t>(id.value)), reader_->path()};
    else
      return reader_->fields(static_cast<std::size_t>(id.value));
  }
  [[nodiscard]] const Reader& reader() const noexcept { return *reader_; }

 private:
  std::shared_ptr<const Reader> owned_;
  const Reader* reader_;
};

template <any_reader Reader>
read_stage<Reader> read(const Reader& r) {
  return read_stage<Reader>(r);
}
template <any_reader Reader>
  requires(!std::is_lvalue_reference_v<Reader>)
read_stage<Reader> read(Reader&& r) {
  return read_stage<Reader>(std::make_shared<const Reader>(std::move(r)));
}

}  // namespace sluice
