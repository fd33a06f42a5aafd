// The campaign's end (Campaign, campaign_internal.h): what each detector
// judges over the whole campaign, then the coverage each earned, the
// verdict, the timeline, and the result sealed into the evidence store.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "auditor/campaign/campaign_internal.h"
#include "auditor/campaign/command_result.h"
#include "auditor/detectors/detector.h"
#include "common/clock.h"
#include "common/status_macros.h"

namespace kvcanary::auditor::campaign_internal {

// After the probes: what each detector judges over the whole campaign
// (the kv_events pairs, golden's rates, the trace's ledgers).
absl::Status Campaign::FinishDetectors(bool after_error) {
  for (const bool sends : {true, false}) {
    for (const auto& d : detectors_) {
      if (d->spec().finish_sends != sends || (sends && after_error) ||
          !finished_.insert(d.get()).second) {
        continue;
      }
      FindingList found;
      const absl::Status s = d->Finish(io_, found);
      // What it found before an error is kept.
      RETURN_IF_ERROR(AddFindings(std::move(found.findings), /*flush=*/true));
      RETURN_IF_ERROR(s);
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> Campaign::TenantProblems() const {
  std::vector<std::string> out;
  for (size_t t = 0; t < o_.tenants.size(); ++t) {
    if (tenants_[t].refused > 0) {
      out.push_back(absl::StrCat(
          o_.tenants[t].name, ": ", tenants_[t].refused,
          " probes refused (HTTP 401/403) after its key was accepted: the "
          "tenant is not covered"));
    }
  }
  return out;
}

void Campaign::Finish(const absl::Status& run) {
  r_.ended_us = NowUs();
  if (run.ok()) {
    CoverageRules rules;
    rules.tenants = r_.tenants;
    rules.settings = settings_;
    rules.required = o_.required;
    std::map<std::string, int> findings;
    for (const Finding& f : r_.findings) ++findings[f.detector];
    for (const auto& d : detectors_) {
      const std::string& name = d->spec().name;
      auto c = r_.positive_controls.find(name);
      rules.control = c == r_.positive_controls.end()
                          ? std::nullopt
                          : std::optional<bool>(c->second);
      rules.findings = findings[name];
      r_.detectors.push_back(JudgedCoverage(*d, rules));
      // The counts it judged were refit (template_shift.cc).
      if (name == "boundary") {
        for (const std::string& n : shift_notes_) {
          r_.detectors.back().notes.push_back(n);
        }
      }
    }
  }
  for (const auto& d : detectors_) d->Report(&r_);
  NoteSpend(&r_, session_.spend());
  DecideResult(&r_, run,
               run.ok() ? TenantProblems() : std::vector<std::string>{});
  const PlantSizing& sizing = cal_.sizing;
  r_.plants.form = sizing.form;
  r_.plants.markers_per_plant = sizing.markers_per_plant;
  r_.plants.prompt_tokens = sizing.median_tokens;
  r_.plants.fill = sizing.fill;
  r_.timeline = MakeTimeline(r_.started_us, r_.ended_us, probe_times_,
                             error_times_, r_.findings);
  uint64_t trace_events = 0, trace_dropped = 0;
  for (const TraceNodeStats& n : r_.trace_nodes) {
    trace_events += n.events;
    trace_dropped += n.dropped;
  }
  SealResult(&r_, log_.get(),
             {{"probes", r_.probes},
              {"usable", r_.usable},
              {"trace_events", trace_events},
              {"trace_dropped", trace_dropped}},
             metrics_);
  Progress(VerdictName(r_.verdict));
}

}  // namespace kvcanary::auditor::campaign_internal
