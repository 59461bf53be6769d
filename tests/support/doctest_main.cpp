// main() of every doctest binary. ctest runs each case alone with --test-case=<name>; a name that
// ctest or doctest cannot pass through (a ';' splits it into two ctest entries, neither of which
// matches) would run nothing and still pass. So a run filtered by --test-case that selects no case
// fails, naming the filter, instead of passing with nothing tested.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

namespace {

unsigned g_selected = 0;
bool g_run_ended = false;

// Records how many cases passed the filters; reports nothing itself.
struct selection_counter : doctest::IReporter {
  explicit selection_counter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override {
    g_selected = s.numTestCasesPassingFilters;
    g_run_ended = true;
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("sluice_selection_counter", 1, selection_counter);

bool starts_with(const char* s, const char* prefix) { return std::strncmp(s, prefix, std::strlen(prefix)) == 0; }

}  // namespace

int main(int argc, char** argv) {
  const char* filter = nullptr;
  for (int i = 1; i < argc; ++i) {
    for (const char* p : {"--test-case=", "-tc=", "--dt-test-case=", "--dt-tc="})
      if (starts_with(argv[i], p)) filter = argv[i] + std::strlen(p);
  }
  doctest::Context context(argc, argv);
  const int rc = context.run();
  if (context.shouldExit()) return rc;  // --help, --list-test-cases (ctest's discovery), ...
  if (rc == 0 && filter != nullptr && g_run_ended && g_selected == 0) {
    std::fprintf(stderr, "error: --test-case=%s selected no test case (does the name hold a ';'?)\n", filter);
    return 1;
  }
  return rc;
}
