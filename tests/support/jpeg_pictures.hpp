// jpeg_pictures.hpp — a fields reader over JPEGs held in memory, for the split-decode tests: field
// "jpg" is image i's bytes, "cls" its class (i % 10), every sample from "pictures.tar". A test
// derives from it and fills `jpegs` its own way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/schema.hpp"

namespace sluice_test {

using pics = sluice::schema<sluice::field<"jpg", std::uint8_t, sluice::variable>, sluice::field<"cls", std::int64_t>>;

struct jpeg_pictures {
  using reader_concept = sluice::reader_tag;
  std::vector<std::vector<std::byte>> jpegs;
  std::vector<std::int64_t> cls;

  void add(std::vector<std::byte> jpeg) {
    cls.push_back(static_cast<std::int64_t>(jpegs.size() % 10));
    jpegs.push_back(std::move(jpeg));
  }
  [[nodiscard]] std::size_t size() const { return jpegs.size(); }
  [[nodiscard]] std::string_view path() const { return "pictures.tar"; }
  [[nodiscard]] sluice::fields_sample<pics> fields(std::size_t i) const {
    sluice::fields_sample<pics> s{.id = i, .origin = path()};
    s.set<"jpg">(jpegs[i]);
    s.set<"cls">(std::span<const std::int64_t>(&cls[i], 1));
    return s;
  }
};

}  // namespace sluice_test
