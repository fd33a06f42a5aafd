#include "auditor/result/coverage.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kvcanary::auditor {

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kClean:
      return "clean";
    case Verdict::kFindings:
      return "findings";
    case Verdict::kError:
      return "error";
    case Verdict::kInconclusive:
      return "inconclusive";
  }
  return "error";
}

const char* DetectorStateName(DetectorState s) {
  switch (s) {
    case DetectorState::kActive:
      return "active";
    case DetectorState::kInconclusive:
      return "inconclusive";
    case DetectorState::kDisabled:
      return "disabled";
  }
  return "inconclusive";
}

void DetectorCoverage::AddFailure(absl::string_view why) {
  if (!failure.empty()) absl::StrAppend(&failure, "; ");
  absl::StrAppend(&failure, why);
}

void DetectorCoverage::Judge(const std::vector<std::string>& tenants) {
  reason.clear();
  if (!disabled.empty()) {
    state = required ? DetectorState::kInconclusive : DetectorState::kDisabled;
    reason = required ? absl::StrCat("required but disabled: ", disabled)
                      : absl::StrCat("disabled: ", disabled);
    return;
  }
  std::vector<std::string> below;
  for (const std::string& t : tenants) {
    auto it = coverage.find(t);
    const int n = it == coverage.end() ? 0 : it->second;
    if (n < floor) below.push_back(absl::StrCat(t, " ", n));
  }
  if (!failure.empty()) {
    state = DetectorState::kInconclusive;
    reason = failure;
  }
  if (!below.empty()) {
    state = DetectorState::kInconclusive;
    absl::StrAppend(&reason, reason.empty() ? "" : "; ", "below the floor of ",
                    floor, " ", unit, ": ", absl::StrJoin(below, ", "));
  }
  if (failure.empty() && below.empty()) state = DetectorState::kActive;
}

std::string DetectorCoverage::CoverageText() const {
  if (coverage.empty()) return "-";
  std::vector<std::pair<int, std::string>> order;
  for (const auto& [t, n] : coverage) order.push_back({n, t});
  std::sort(order.begin(), order.end());
  std::vector<std::string> parts;
  for (const auto& [n, t] : order) parts.push_back(absl::StrCat(t, " ", n));
  return absl::StrJoin(parts, ", ");
}

nlohmann::json DetectorCoverage::ToJson() const {
  return {{"name", name},
          {"required", required},
          {"state", DetectorStateName(state)},
          {"reason", reason},
          {"floor", floor},
          {"unit", unit},
          {"coverage", coverage},
          {"notes", notes},
          {"findings", findings},
          {"stats", stats}};
}

int FloorOf(const std::map<std::string, int>& floors,
            const std::string& detector) {
  auto it = floors.find(detector);
  if (it != floors.end()) return it->second;
  it = floors.find("");
  return it != floors.end() ? it->second : kDefaultFloor;
}

VerdictDecision DecideVerdict(const absl::Status& run, bool audit_started,
                              size_t findings,
                              const std::vector<DetectorCoverage>& detectors,
                              const std::vector<std::string>& problems) {
  VerdictDecision d;
  if (!run.ok()) {
    d.error =
        run.message().empty() ? run.ToString() : std::string(run.message());
  }
  if (!run.ok() && (!audit_started || findings == 0)) {
    d.verdict = Verdict::kError;
    d.reasons.push_back(d.error);
    return d;
  }
  if (findings > 0) {
    d.verdict = Verdict::kFindings;
    d.reasons.push_back(absl::StrCat(findings, " finding rows"));
  }
  std::vector<std::string> gaps = problems;
  for (const DetectorCoverage& c : detectors) {
    if (c.required && c.state != DetectorState::kActive) {
      gaps.push_back(absl::StrCat(c.name, ": ", c.reason));
    }
  }
  if (findings == 0) {
    d.verdict = gaps.empty() ? Verdict::kClean : Verdict::kInconclusive;
  }
  // With findings, what could not be checked is still worth saying.
  for (std::string& g : gaps) d.reasons.push_back(std::move(g));
  return d;
}

}  // namespace kvcanary::auditor
