// prompt_logprobs: a golden prompt scored (echo with logprobs) under load
// must give its own tokens the log-probabilities it got alone, over as many
// positions. A prompt whose K/V was contaminated, truncated or replaced
// changes them even when the answer does not; fewer positions than alone
// is a prompt the target did not process whole. Where the target ignores
// or refuses echo with logprobs, disabled, saying so. Judging:
// auditor/detectors/logprob_judge.h.
#include "auditor/detectors/logprob_judge.h"
#include "auditor/detectors/registry.h"

namespace kvcanary::auditor {
namespace {

class PromptLogprobsDetector
    : public LogprobDetectorOf<PromptLogprobsDetector> {
 public:
  static DetectorSpec Spec() {
    DetectorSpec s;
    s.name = "prompt_logprobs";
    s.summary =
        "a scored prompt's own log-probabilities under load that differ "
        "from those alone, or cover fewer of its tokens";
    s.unit = "scored prompts compared";
    s.order = 24;
    s.probes = {{ProbeKind::kScore, 1.0}};
    // Each scored prompt is judged whole (exact mode: bitwise; its count
    // in either mode), so a few per tenant vouch for it; distance mode
    // needs its 10 a side besides.
    s.default_floor = 5;
    return s;
  }

 protected:
  Names names() const override {
    return {"prompt_logprobs", ProbeKind::kScore, "prompt_logprobs_mismatch",
            "prompt_logprobs_distance_rate", "prompt_scored_short"};
  }
  const LogprobCalibration& calibrated() const override {
    return view().calibration->scored;
  }
};
KVCANARY_REGISTER_DETECTOR(PromptLogprobsDetector);

}  // namespace
}  // namespace kvcanary::auditor
