// Judging an answer's log-probabilities against those it got alone
// (logprob_golden, prompt_logprobs): bitwise on a target whose answers
// alone are bitwise the same, else by distance against the distances seen
// under same-tenant load (auditor/detectors/rates.h). Positions are
// compared by token text and figure; nothing of either reaches a finding.
#ifndef KVCANARY_AUDITOR_DETECTORS_LOGPROB_JUDGE_H_
#define KVCANARY_AUDITOR_DETECTORS_LOGPROB_JUDGE_H_

#include <optional>
#include <string>
#include <vector>

#include "auditor/calibration/calibration.h"
#include "auditor/detectors/detector.h"
#include "auditor/detectors/rates.h"
#include "auditor/target/answer_logprobs.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

struct LogprobDiff {
  bool same = true;  // every position bitwise the same, none more or fewer
  int expected_positions = 0, got_positions = 0;
  int first_difference = -1;   // the first position that differs; -1: none
  bool tokens_differ = false;  // some position holds another token
  // The largest |difference| of a figure over the positions holding the
  // same token with a figure on both sides (alternatives included, by
  // text).
  double max_delta = 0;
  // The same, over the positions whose context is the same on both sides:
  // up to and including the first that holds another token (there only
  // alternatives compare).
  double context_delta = 0;
  // For a finding's detail: counts and figures, no text.
  nlohmann::json ToJson() const;
};

LogprobDiff CompareLogprobs(const std::vector<AnswerLogprob>& alone,
                            const std::vector<AnswerLogprob>& got);

// What distance mode judges: context_delta (an answer that took another
// token is judged by how far its figures had moved up to there), or
// infinity where either side has no position.
double LogprobDistance(const LogprobDiff& d);

// Distances under same-tenant load (the baseline) against those under
// cross-tenant load: the share above the baseline's 90th percentile.
class DistanceRates {
 public:
  void Add(bool baseline, double distance);
  struct Verdict {
    RateRise rise;
    double threshold = 0;  // the baseline's 90th percentile
    int base_above = 0, cross_above = 0;
  };
  // nullopt until each side has kMinRateProbes.
  std::optional<Verdict> Judge() const;
  int base_n() const { return static_cast<int>(base_.size()); }
  int cross_n() const { return static_cast<int>(cross_.size()); }

 private:
  std::vector<double> base_, cross_;
};

// What logprob_golden and prompt_logprobs share: one probe kind's answers
// judged against one LogprobCalibration, bitwise or by distance rates, with
// the same coverage rules. Each detector's file says what it reads and
// names its findings.
class LogprobDetector : public Detector {
 public:
  struct Names {
    const char* detector;
    ProbeKind kind;
    const char* mismatch;  // an answer that differs (exact mode)
    const char* rate;      // distances rising under cross-tenant load
    // An answer with fewer positions than alone, judged in both modes
    // (nullptr: not judged apart).
    const char* fewer;
  };

  void Judge(const Probe& probe, const Completion& answer,
             const std::vector<Finding>& earlier, FindingSink& out) override;
  absl::Status Finish(CampaignIo& io, FindingSink& out) override;
  std::vector<ControlCase> Controls() const override;
  DetectorCoverage Coverage(int floor) const override;

 protected:
  virtual Names names() const = 0;
  virtual const LogprobCalibration& calibrated() const = 0;

 private:
  // `got` against variant's positions alone, or against those measured
  // again after a template shift where one of them is nearer.
  LogprobDiff Closest(int variant, const std::vector<AnswerLogprob>& got) const;
  // The finding (if any) for one answer's positions against variant's.
  std::optional<Finding> JudgeOne(int variant, const std::string& tenant,
                                  const std::vector<AnswerLogprob>& got) const;
  std::optional<Finding> JudgeRates(const DistanceRates& rates) const;
  void DistanceCoverage(bool all_by_distance, DetectorCoverage* d) const;

  TenantCounts compared_;
  int without_logprobs_ = 0;  // usable answers under load carrying none
  DistanceRates rates_;
};

// spec() from the class's static Spec(), as DetectorOf.
template <typename Derived>
class LogprobDetectorOf : public LogprobDetector {
 public:
  const DetectorSpec& spec() const override {
    static const DetectorSpec* const spec = new DetectorSpec(Derived::Spec());
    return *spec;
  }
};

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_DETECTORS_LOGPROB_JUDGE_H_
