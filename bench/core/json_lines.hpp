// The main() of sluice's Google Benchmark binaries: the usual console output, plus, with --json,
// one JSON line per result after it, so that runs can be compared with a line diff or jq:
//
//   {"name":"BM_fields_direct_collate","items_per_second":...,"bytes_per_second":...,
//    "baseline":"BM_fields_direct_memcpy","ratio":0.93,"loadavg":"2.1 2.3 2.0"}
//
// Each binary names, per benchmark, the baseline it is measured against (the memcpy roofline
// in the same run); the ratio is items/s over the baseline's items/s from the same run (the same
// repetition index when --benchmark_repetitions is used). loadavg is /proc/loadavg's first three
// fields at the start of the run.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <fstream>
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace sluice_bench {

inline std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

struct result {
  std::string name;
  double items = 0, bytes = 0;
  std::map<std::string, double> extra;
};

// Console output as usual; keeps every non-aggregate run for the JSON lines.
class collecting_reporter : public benchmark::ConsoleReporter {
 public:
  std::vector<result> results;
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred) continue;
      result x;
      x.name = r.run_name.function_name + (r.run_name.args.empty() ? "" : "/" + r.run_name.args);
      for (const auto& [k, c] : r.counters) {
        if (k == "items_per_second") x.items = c.value;
        else if (k == "bytes_per_second") x.bytes = c.value;
        else x.extra[k] = c.value;
      }
      results.push_back(std::move(x));
    }
  }
};

inline std::string json_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    o += ch;
  }
  return o;
}

// baselines: (benchmark name (function/args, as in the JSON "name"), a baseline's name); a
// benchmark may have several: the first is "baseline"/"ratio", all are in "ratios".
inline int run_main(int argc, char** argv, const std::vector<std::pair<std::string, std::string>>& baselines) {
  bool json = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--json") json = true;
    else args.push_back(argv[i]);
  }
  const std::string load = loadavg();
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  std::fprintf(stderr, "loadavg at start: %s\n", load.c_str());
  collecting_reporter rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  benchmark::Shutdown();
  if (!json) return 0;
  std::map<std::string, int> seen;  // repetition index per name
  std::map<std::string, std::vector<double>> by_name;
  for (const auto& r : rep.results) by_name[r.name].push_back(r.items);
  std::fflush(stdout);
  for (const auto& r : rep.results) {
    const int rep_i = seen[r.name]++;
    std::string line = "{\"name\":\"" + json_escape(r.name) + "\"";
    char num[64];
    std::snprintf(num, sizeof num, "%.6g", r.items);
    line += std::string(",\"items_per_second\":") + num;
    std::snprintf(num, sizeof num, "%.6g", r.bytes);
    line += std::string(",\"bytes_per_second\":") + num;
    for (const auto& [k, v] : r.extra) {
      std::snprintf(num, sizeof num, "%.6g", v);
      line += ",\"" + json_escape(k) + "\":" + num;
    }
    std::string ratios;
    bool first = true;
    for (const auto& [name, base_name] : baselines) {
      if (name != r.name) continue;
      auto it = by_name.find(base_name);
      std::string v = "null";
      if (it != by_name.end() && !it->second.empty()) {
        const double base = it->second[std::min<std::size_t>(static_cast<std::size_t>(rep_i), it->second.size() - 1)];
        std::snprintf(num, sizeof num, "%.4f", base > 0 ? r.items / base : 0.0);
        v = num;
      }
      if (first) line += ",\"baseline\":\"" + json_escape(base_name) + "\",\"ratio\":" + v;
      ratios += std::string(first ? "" : ",") + "\"" + json_escape(base_name) + "\":" + v;
      first = false;
    }
    if (!ratios.empty()) line += ",\"ratios\":{" + ratios + "}";
    line += ",\"loadavg\":\"" + load + "\"}";
    std::printf("%s\n", line.c_str());
  }
  return 0;
}

}  // namespace sluice_bench
