// logprob_golden: a golden answer's log-probabilities under load must be
// the ones it got alone. A greedy answer's text changes only when a foreign
// page flips an argmax; its figures move as soon as one enters attention.
// Where the target returns none (or refuses `logprobs: 5`), disabled,
// saying so. Judging: auditor/detectors/logprob_judge.h.
#include "auditor/detectors/logprob_judge.h"
#include "auditor/detectors/registry.h"

namespace kvcanary::auditor {
namespace {

class LogprobGoldenDetector : public LogprobDetectorOf<LogprobGoldenDetector> {
 public:
  static DetectorSpec Spec() {
    DetectorSpec s;
    s.name = "logprob_golden";
    s.summary =
        "a golden answer's log-probabilities under load that differ from "
        "those it got alone";
    s.unit = "golden log-probabilities compared";
    s.order = 22;
    s.probes = {{ProbeKind::kGolden, 1.0}};
    return s;
  }

 protected:
  Names names() const override {
    return {"logprob_golden", ProbeKind::kGolden, "logprob_mismatch",
            "logprob_distance_rate", nullptr};
  }
  const LogprobCalibration& calibrated() const override {
    return view().calibration->golden_logprobs;
  }
};
KVCANARY_REGISTER_DETECTOR(LogprobGoldenDetector);

}  // namespace
}  // namespace kvcanary::auditor
