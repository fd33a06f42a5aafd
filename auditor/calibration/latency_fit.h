// The prefill cost of a target, measured alone on cache-busted prompts:
// time to first token as a line in the prompt's length. The latency
// detector needs it to grow (else no timed pair can show a prompt that was
// not read: auditor/detectors/latency.h); forensics takes its floor from it.
#ifndef KVCANARY_AUDITOR_CALIBRATION_LATENCY_FIT_H_
#define KVCANARY_AUDITOR_CALIBRATION_LATENCY_FIT_H_

#include <string>
#include <utility>
#include <vector>

namespace kvcanary::auditor {

struct LatencyModel {
  bool calibrated = false;
  double base_ms = 0;       // fastest first token at the shortest length
  double per_token_ms = 0;  // prefill cost per prompt token (the fit's slope)
  double intercept_ms = 0;  // the fit's intercept
  double r2 = 0;            // goodness of the fit on per-length minima
  int lengths = 0;          // distinct prompt lengths fitted
  std::string failure;      // why the calibration failed ("" if it did not)
};
// Fits ttft = intercept + per_token × prompt_tokens to `samples` (prompt
// tokens, ttft ms) on the fastest of each length (other work only ever
// adds time). Calibrated only with at
// least three lengths, a positive slope, R² >= 0.8 and a prefill share of
// at least 1 ms at the longest length; otherwise `failure` says which (a
// flat or zero cost is a failed calibration, not a fast server).
LatencyModel FitLatency(const std::vector<std::pair<int, double>>& samples);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_CALIBRATION_LATENCY_FIT_H_
