#include "engine/faults.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kvcanary::engine {

const std::vector<FaultInfo>& AllFaults() {
  static const auto* all = new std::vector<FaultInfo>{
      {Fault::kAdmissionAbortLost, "admission-abort-lost",
       "an over-long prompt's rejection is written to a field the queues never "
       "read: "
       "prefill ships a one-token placeholder page, decode attends over every "
       "page it "
       "reserved (router, prefill and decode)"},
      {Fault::kPageCountMismatch, "page-count-mismatch",
       "prefill counts pages with a floor and drops a partial last page; "
       "decode commits "
       "without comparing pages and tokens received with its reservation "
       "(prefill and "
       "decode)"},
  };
  return *all;
}

absl::StatusOr<FaultSet> FaultSet::Parse(absl::string_view names) {
  FaultSet set;
  if (names.empty() || names == "none") return set;
  for (absl::string_view name : absl::StrSplit(names, ',', absl::SkipEmpty())) {
    bool found = false;
    for (const FaultInfo& f : AllFaults()) {
      if (name == f.name) {
        set.add(f.fault);
        found = true;
      }
    }
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown fault '", name, "' (kvcanary-engine faults lists them)"));
    }
  }
  return set;
}

std::string FaultSet::ToString() const {
  std::vector<std::string> names;
  for (const FaultInfo& f : AllFaults()) {
    if (has(f.fault)) names.push_back(f.name);
  }
  return names.empty() ? "none" : absl::StrJoin(names, ",");
}

}  // namespace kvcanary::engine
