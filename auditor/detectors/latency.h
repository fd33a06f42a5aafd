// Latency plausibility: a first token too fast for the prompt the target
// claims to have read means it did not read it (the 2026 incident's
// one-token placeholder answered with the real prompt_tokens). Judged on
// cache-busted, streamed prompts at and past the limit against the prefill
// cost calibrated alone (auditor/calibration/latency_fit.h).
#ifndef KVCANARY_AUDITOR_DETECTORS_LATENCY_H_
#define KVCANARY_AUDITOR_DETECTORS_LATENCY_H_

#include <optional>
#include <string>

#include "auditor/calibration/latency_fit.h"
#include "auditor/result/finding.h"

namespace kvcanary::auditor {

// A first token faster than base + 0.3 × per_token × prompt_tokens means
// the prompt was not prefilled. Judged only where the prefill share is at
// least 1 ms (returns nullopt and sets *judged false otherwise).
std::optional<Finding> JudgeLatency(const LatencyModel& model,
                                    int prompt_tokens, double ttft_ms,
                                    const std::string& tenant,
                                    const std::string& template_name,
                                    bool* judged = nullptr);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_DETECTORS_LATENCY_H_
