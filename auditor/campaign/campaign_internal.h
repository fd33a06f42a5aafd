// The campaign's run (auditor/campaign/campaign.h's RunCampaign) as a class,
// for the files its steps are split into. Internal to auditor/campaign/.
#ifndef KVCANARY_AUDITOR_CAMPAIGN_CAMPAIGN_INTERNAL_H_
#define KVCANARY_AUDITOR_CAMPAIGN_CAMPAIGN_INTERNAL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "auditor/campaign/calibrate.h"
#include "auditor/campaign/campaign.h"
#include "auditor/campaign/probe_mix.h"
#include "auditor/detectors/detector.h"
#include "auditor/evidence/log.h"
#include "auditor/target/completion.h"
#include "auditor/target/multi_client.h"
#include "auditor/target/prompts.h"
#include "auditor/target/target.h"
#include "canaries/scanner.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor::campaign_internal {

// What the campaign itself counts per tenant, beside its detectors.
struct TenantState {
  // Which plant, golden variant or scored variant next.
  int plant_cursor = 0, golden_cursor = 0, score_cursor = 0;
  int hangup_cursor = 0;  // which stage next
  int refused = 0;        // 401/403 during the run
};

// One campaign's run (RunCampaign). Its steps are split by job:
// campaign.cc (the start, discovery, calibration, the controls, the order
// of the steps), probes.cc (one probe's prompt and request, its answer
// recorded and judged), load.cc (the mix, the main loop, the timed pairs),
// exercises.cc (the bursts, the hang-ups' aim) and verdict.cc (the
// detectors' whole-campaign judgement, the verdict, the seal). Internal to
// auditor/campaign/; not for other callers.
// Not thread-safe; one Run() on the command's thread.
class Campaign {
 public:
  Campaign(const CampaignOptions& options, AuditorMetrics* metrics);

  CampaignResult Run();

 private:
  // campaign.cc: the start and the order of the steps.
  absl::Status Steps();
  absl::Status RecordStart();
  absl::Status StartDetectors();
  absl::Status Calibrated();
  void BuildScanner();
  absl::Status Controls();
  void Progress(const char* what);

  // load.cc: the load and the timed pairs after it.
  // The kinds of probe to send each tenant, and how many of each.
  ProbeMix Mix(bool rate_mode) const;
  // The load's next probe: its tenant (in turn; tenant 0 in golden's
  // baseline), kind and id.
  Probe NextLoadProbe(ProbeMix* mix, uint64_t sent, bool baseline);
  absl::Status MainLoop();
  absl::Status TimedPairs();

  // exercises.cc.
  absl::Status Bursts();
  // When a hang-up probe's client gives up (p->hangup set here), on `r`.
  void AimHangup(Probe* p, ProbeRequest* r);

  // verdict.cc: the end.
  // What the detectors judge over the whole campaign: those that send
  // first (the kv_events pairs), then the others; after an error only the
  // others, so that what they proved is kept (`after_error`).
  absl::Status FinishDetectors(bool after_error);
  std::vector<std::string> TenantProblems() const;
  void Finish(const absl::Status& run);

  // probes.cc: one probe, sent and judged.
  // The prompt of `p` (its kind and tenant set) and the tokens it
  // generates; fills in p's other fields.
  std::string ProbePrompt(Probe* p, int* max_tokens);
  ProbeRequest MakeProbe(Probe* p);
  // An answer to a probe sent through a MultiClient: its probe taken out
  // of `in_flight`, the completion parsed and noted, then judged.
  absl::Status OnAnswer(const ProbeResponse& resp,
                        std::map<uint64_t, Probe>* in_flight);
  // One answer: its evidence row, then every detector's judgement (its
  // prediction moved by the template's shift, Refit).
  absl::Status Judge(const Probe& p, const Completion& c);
  // template_shift.cc: `p`'s prediction with the tokens every prompt
  // gained or lost since calibration (a chat template that prints the
  // date, crossing midnight). A count off by more than the calibrated
  // tolerance, and by at most kMaxTemplateShift, is re-checked with a
  // short control alone: off by as much, the shift is uniform — refit and
  // noted, never a finding; otherwise the detectors judge it.
  absl::Status Refit(Probe* p, const Completion& c);
  // After a refit: each golden variant alone again, as the first tenant;
  // an answer that changed is added to cal_.golden_also (`changed` counts
  // them).
  absl::Status RebaselineGolden(int* changed);
  absl::Status RecordProbe(const Probe& p, const Completion& c);
  absl::Status AddFinding(Finding f, bool flush);
  absl::Status AddFindings(std::vector<Finding> found, bool flush);

  absl::Status Record(const std::string& kind, nlohmann::json body,
                      bool flush = false) {
    return log_ == nullptr ? absl::OkStatus()
                           : log_->Record(kind, std::move(body), flush);
  }
  absl::Status Flush() {
    return log_ == nullptr ? absl::OkStatus() : log_->Flush();
  }

  const CampaignOptions& o_;
  AuditorMetrics* metrics_;
  const std::string key_;
  Target session_;
  std::vector<std::unique_ptr<Detector>> detectors_;  // report order
  const DetectorSettings settings_;
  std::set<const Detector*> finished_;  // their Finish has run
  std::unique_ptr<EvidenceLog> log_;
  CampaignIo io_;
  canaries::MarkerScanner scanner_;
  Calibration cal_;
  CampaignView view_;
  CacheBuster buster_;
  std::vector<TenantState> tenants_;
  int64_t next_probe_ = 0;
  // Refit: the template's shift now and before the last refit, the first
  // probe sent under it, the controls sent, and each refit, for the notes.
  int shift_ = 0, prev_shift_ = 0;
  int64_t shift_from_ = 0;
  int shift_checks_ = 0;
  std::vector<std::string> shift_notes_;
  std::vector<int64_t> probe_times_, error_times_;  // Unix µs
  CampaignResult r_;
};

}  // namespace kvcanary::auditor::campaign_internal

#endif  // KVCANARY_AUDITOR_CAMPAIGN_CAMPAIGN_INTERNAL_H_
