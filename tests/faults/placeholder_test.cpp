// Placeholder so the suite builds while its cases land; removed with the first real case.
#include <doctest/doctest.h>

#include "test_util.hpp"

TEST_CASE("skip reports Skipped to ctest") {
  if (std::getenv("SLUICE_TEST_SKIP_CHECK") == nullptr) sluice_test::skip("self-check of the skip path");
  CHECK(true);
}
