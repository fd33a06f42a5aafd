// The hang-up exercise: probes whose client gives up on purpose at each
// stage of a request — queued, mid-prefill, while a split engine ships the
// prompt's K/V, at the first token — so that the target's abort paths (where
// abort-transfer-race and kin live) run during every campaign. It finds
// nothing itself: what an abort exposes, the other detectors find (a trace's
// late writes, another tenant's answer). Its coverage says the paths were
// exercised, so a campaign that never reached them cannot imply it did
// (`--require hangups`). docs/auditor.md, "Exercises".
#include <array>

#include "absl/strings/str_format.h"
#include "auditor/detectors/registry.h"

namespace kvcanary::auditor {
namespace {

class HangupsExercise : public DetectorOf<HangupsExercise> {
 public:
  static DetectorSpec Spec() {
    DetectorSpec s;
    s.name = "hangups";
    s.summary =
        "an exercise: clients hang up queued, mid-prefill, mid-transfer and "
        "at the first token, so the target's abort paths run (what they "
        "expose, the other detectors find)";
    s.unit = "hang-ups before the answer ended";
    s.order = 80;
    s.default_floor = 4;  // one per stage
    s.exercise = true;
    s.required_by_default = false;
    s.probes = {{ProbeKind::kHangup, 1.0}};
    return s;
  }

  void Judge(const Probe& p, const Completion& c, const std::vector<Finding>&,
             FindingSink&) override {
    if (p.kind != ProbeKind::kHangup) return;
    const int stage = static_cast<int>(p.hangup);
    ++sent_[stage];
    // The target answered (or refused) before the hang-up: no abort ran.
    if (!c.hung_up) return;
    ++hung_up_[stage];
    done_.Add(p.tenant);
  }

  // Nothing to find, so no control: its coverage counts what it did.
  std::vector<ControlCase> Controls() const override { return {}; }

  DetectorCoverage Coverage(int) const override {
    DetectorCoverage d;
    if (!prepared()) return d;
    d.coverage = done_.Named(view().tenants);
    const Calibration& cal = *view().calibration;
    if (cal.unit_tokens == 0 || cal.at_limit_units == 0) {
      d.disabled = "no prompt at the input limit to hang up on";
    }
    nlohmann::json stats = nlohmann::json::object();
    std::string per_stage;
    for (int s = 0; s < kHangupStages; ++s) {
      const char* name = HangupStageName(static_cast<HangupStage>(s));
      stats[absl::StrCat(name, "_sent")] = sent_[s];
      stats[absl::StrCat(name, "_hung_up")] = hung_up_[s];
      absl::StrAppendFormat(&per_stage, "%s%s %d of %d",
                            per_stage.empty() ? "" : ", ", name, hung_up_[s],
                            sent_[s]);
    }
    d.notes.push_back(absl::StrCat(
        "hung up before the answer ended, per stage: ", per_stage,
        " (stages are aimed by the time an at-limit prompt takes alone; "
        "an engine trace shows where each one landed)"));
    if (!cal.latency.calibrated) {
      d.notes.push_back(
          "first-token time not calibrated: only the queued and first-token "
          "stages were aimed");
    }
    d.stats = std::move(stats);
    return d;
  }

 private:
  std::array<int, kHangupStages> sent_{}, hung_up_{};
  TenantCounts done_;
};
KVCANARY_REGISTER_DETECTOR(HangupsExercise);

}  // namespace
}  // namespace kvcanary::auditor
