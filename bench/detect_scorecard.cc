// The scorecard's cells (a rate with its Wilson interval, each detector's
// rate and median to its first finding), its rows and totals, and the JSON
// document beside it.
#include "bench/detect_scorecard.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/detect_flags.h"
#include "bench/machine.h"
#include "common/stats.h"

namespace kvcanary::bench {
namespace {

using json = nlohmann::json;

std::string Rate(int k, int n) {
  const auto [lo, hi] = Wilson95(k, n);
  return absl::StrFormat("%d/%d [%.2f, %.2f]", k, n, lo, hi);
}

std::string DetectorCell(const json& s) {
  std::vector<std::string> parts;
  const int n = s["campaigns"];
  for (const auto& [d, v] : s["detectors"].items()) {
    // A judgement over a stream (trace, kv_events) names no probe.
    const json& probes = v["median_probes_to_first"];
    parts.push_back(absl::StrFormat(
        "%s %d/%d (%s, %.1f s)", d, v["campaigns_with_finding"].get<int>(), n,
        probes.is_number() ? absl::StrCat(probes.get<int64_t>(), " probes")
                           : std::string("no probe named"),
        v["median_seconds_to_first"].get<double>()));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, "; ");
}

}  // namespace

Scorecard::Scorecard()
    : table_({{"configuration", TextTable::kLeft, 30},
              {"mode", TextTable::kLeft, 9},
              {"any finding [95%]", TextTable::kRight, 20},
              {"inconcl.", TextTable::kRight, 8},
              {"errors", TextTable::kRight, 6},
              {"detectors (campaigns, median to first)", TextTable::kLeft, 40}},
             TextTable::Markdown()) {}

void Scorecard::PrintHeader() const {
  std::printf("%s", table_.HeaderText().c_str());
  std::fflush(stdout);
}

void Scorecard::Add(const Config& c, const std::string& mode, json row) {
  if (c.healthy) {
    false_alarms_ += row["with_any_finding"].get<int>();
    healthy_campaigns_ += row["campaigns"].get<int>();
  }
  errors_ += row["errors"].get<int>();
  std::printf(
      "%s",
      table_
          .RowText({c.name, mode,
                    Rate(row["with_any_finding"], row["campaigns"]),
                    absl::StrCat(row["inconclusive"].get<int>()),
                    absl::StrCat(row["errors"].get<int>()), DetectorCell(row)})
          .c_str());
  std::fflush(stdout);
  rows_.push_back(std::move(row));
}

void Scorecard::PrintTotals(double elapsed_s) const {
  std::printf(
      "\nhealthy campaigns with any finding (false alarms): %d of %d; %.0f s "
      "in all\n",
      false_alarms_, healthy_campaigns_, elapsed_s);
}

json Scorecard::Document(int duration_s, int seeds, double elapsed_s) const {
  return {{"machine", MachineLine()},
          {"duration_s", duration_s},
          {"api", absl::GetFlag(FLAGS_api)},
          {"numerics", absl::GetFlag(FLAGS_numerics)},
          {"seeds", seeds},
          {"elapsed_s", elapsed_s},
          {"healthy_false_alarms", false_alarms_},
          {"healthy_campaigns", healthy_campaigns_},
          {"rows", rows_}};
}

}  // namespace kvcanary::bench
