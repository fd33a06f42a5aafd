#include "auditor/campaign/command_result.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

void StartResult(CampaignResult* r, const std::string& command,
                 const std::string& target,
                 const std::vector<AuditTenant>& tenants,
                 const std::string& db_path,
                 const std::vector<std::string>& detectors,
                 AuditorMetrics* metrics) {
  r->command = command;
  metrics->SetCommandDetectors(detectors);
  r->started_us = NowUs();
  r->campaign_id = NewCampaignId();
  r->target = target;
  r->db_path = db_path;
  for (const AuditTenant& t : tenants) r->tenants.push_back(t.name);
}

void DecideResult(CampaignResult* r, const absl::Status& run,
                  const std::vector<std::string>& problems) {
  VerdictDecision v = DecideVerdict(run, r->audit_started, r->findings.size(),
                                    r->detectors, problems);
  r->verdict = v.verdict;
  r->reasons = std::move(v.reasons);
  r->error = std::move(v.error);
  if (r->budget_reached && r->verdict == Verdict::kInconclusive) {
    r->reasons.push_back(absl::StrCat(
        "token budget: ", r->spent_tokens,
        " of --budget-tokens=", r->budget_tokens,
        " spent, and new probes stopped before every floor was reached"));
  }
}

void NoteSpend(CampaignResult* r, const SpendLedger& spend) {
  r->spend = spend.tenants();
  r->budget_tokens = spend.budget();
  r->spent_tokens = spend.spent();
  r->budget_reached = spend.stopped();
}

namespace {

// An error found once the verdict was decided (the `campaign_end` row):
// beside the first error, and the verdict decided again by the same rule.
void LateError(CampaignResult* r, const absl::Status& s) {
  const VerdictDecision late =
      DecideVerdict(s, r->audit_started, r->findings.size(), {}, {});
  r->error = r->error.empty() ? late.error
                              : absl::StrCat(r->error, "; then ", late.error);
  if (late.verdict == Verdict::kError && r->verdict != Verdict::kError) {
    r->verdict = Verdict::kError;
    r->reasons = late.reasons;
  }
}

}  // namespace

void SealResult(CampaignResult* r, EvidenceLog* log, json end,
                AuditorMetrics* metrics) {
  r->elapsed = absl::Microseconds(r->ended_us - r->started_us);
  JoinWriters(&r->findings);
  r->incidents = GroupIncidents(r->campaign_id, r->findings);
  if (log != nullptr) {
    for (const Incident& i : r->incidents)
      (void)log->Record("incident", i.ToJson());
    json detectors = json::array();
    for (const DetectorCoverage& d : r->detectors)
      detectors.push_back(d.ToJson());
    if (!end.is_object()) end = json::object();
    end["command"] = r->command;
    end["verdict"] = VerdictName(r->verdict);
    end["result"] = VerdictName(r->verdict);
    end["exit_code"] = r->exit_code();
    end["reasons"] = r->reasons;
    end["detectors"] = detectors;
    end["findings"] = r->findings.size();
    end["incidents"] = r->incidents.size();
    end["elapsed_ms"] = absl::ToDoubleMilliseconds(r->elapsed);
    end["error"] = r->ErrorJson();
    absl::Status s = log->Record("campaign_end", std::move(end), true);
    if (!s.ok()) {
      LateError(r,
                absl::DataLossError(absl::StrCat(
                    "the evidence store could not be written: ", s.message())));
    }
    r->first_seq = log->first_seq();
    r->last_seq = log->last_seq();
  }
  metrics->CountSpend(r->spend);
  metrics->CampaignEnded(r->verdict, r->error.empty(), r->detectors,
                         absl::ToDoubleSeconds(r->elapsed),
                         static_cast<double>(r->ended_us) / 1e6);
}

}  // namespace kvcanary::auditor
