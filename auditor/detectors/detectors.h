// The black-box detectors, as pure functions of what a probe sent and got
// back, so the campaign and its positive controls run the same code on the
// same objects (auditor/campaign/positive_controls.h).
#ifndef KVCANARY_AUDITOR_DETECTORS_DETECTORS_H_
#define KVCANARY_AUDITOR_DETECTORS_DETECTORS_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"
#include "auditor/detectors/latency.h"
#include "auditor/result/finding.h"
#include "canaries/marker.h"
#include "canaries/scanner.h"
#include "common/sha256.h"

namespace kvcanary::auditor {

// Foreign markers in an output the probing tenant received: a marker
// planted by another tenant (exact: critical; a partial run: high), or a
// marker shape of no registered marker (another campaign's: high). Own
// markers are not findings, and neither is a run of another tenant's marker
// that something other than a leak explains: a run lying within a run of
// one of the probing tenant's own markers (two markers share some 3-word
// window about once in 85,000 pairs), or one whose words `prompt`, the
// probe's own prompt, holds too (a target may repeat what it was sent; ""
// if not known). A finding's words_matched is its longest unexplained run.
std::vector<Finding> ScanOutput(const canaries::MarkerScanner& scanner,
                                absl::string_view output,
                                const std::string& probe_tenant,
                                const std::string& probe_kind,
                                absl::string_view prompt = "");

// Golden: a greedy answer under load must equal the one recorded alone.
std::optional<Finding> CompareGolden(int variant, absl::string_view expected,
                                     absl::string_view got,
                                     const std::string& tenant);

// Golden, for a target that is not batch-invariant (its answers differ
// even alone): the rate at which golden answers differ from the one
// recorded alone, under cross-tenant load vs under same-tenant load. A
// finding (golden_divergence_rate) when the cross-tenant rate exceeds the
// baseline by at least 5 points and by 3 standard errors (two-proportion
// z-test, pooled), with at least 10 probes on each side.
std::optional<Finding> JudgeGoldenRates(int baseline_diverged, int baseline_n,
                                        int cross_diverged, int cross_n);

// Echo: a probe that asks to repeat its own nonce must get at least one of
// the nonce's words back; none means the prompt was not processed.
std::optional<Finding> CheckEcho(const canaries::Marker& nonce,
                                 absl::string_view output,
                                 const std::string& tenant);

// Boundary: what the probe sent (in calibrated units of prompt tokens), the
// input limit, and what came back.
struct BoundaryObservation {
  int predicted_prompt_tokens = 0;  // from the calibration
  int limit = 0;  // a longer prompt must be refused (TargetLimit::refuse_above)
  int http_status = 0;              // for an error in a 200 stream: its status
  int reported_prompt_tokens = -1;  // usage.prompt_tokens; -1: none
  int tolerance = 0;  // tokens a unique prefix may vary by (calibrated)
  std::string tenant;
  std::string template_name;  // at_limit, past_limit, quiet, ladder
};
// A 200 past the limit (boundary_accepted), a 200 whose usage.prompt_tokens
// is below what was sent (prompt_truncated: the target processed part of
// the prompt) or otherwise disagrees with it (prompt_tokens_mismatch).
std::vector<Finding> JudgeBoundary(const BoundaryObservation& o);

// Latency plausibility: time to first token against the prefill cost
// calibrated alone (auditor/detectors/latency.h).
// A first token faster than base + 0.3 × per_token × prompt_tokens means
// the prompt was not prefilled. Judged only where the prefill share is at
// least 1 ms (returns nullopt and sets *judged false otherwise).
std::optional<Finding> JudgeLatency(const LatencyModel& model,
                                    int prompt_tokens, double ttft_ms,
                                    const std::string& tenant,
                                    const std::string& template_name,
                                    bool* judged = nullptr);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_DETECTORS_DETECTORS_H_
