// The black-box detectors, as pure functions of what a probe sent and got
// back, so the campaign and the positive controls run the same code.
#ifndef KVCANARY_AUDITOR_DETECTORS_H_
#define KVCANARY_AUDITOR_DETECTORS_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "auditor/findings.h"
#include "canaries/marker.h"
#include "canaries/scanner.h"

namespace kvcanary::auditor {

// Lower-case hex SHA-256 of `text`: how outputs and prompts appear in
// evidence.
std::string Sha256Hex(absl::string_view text);

// Foreign markers in an output the probing tenant received: a marker
// planted by another tenant (exact: critical; a partial run: high), or a
// marker shape of no registered marker (another campaign's: high). Own
// markers are not findings.
std::vector<Finding> ScanOutput(const canaries::MarkerScanner& scanner,
                                absl::string_view output,
                                const std::string& probe_tenant,
                                const std::string& probe_kind);

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
// advertised limit, and what came back.
struct BoundaryObservation {
  int predicted_prompt_tokens = 0;  // from the calibration
  int advertised_limit = 0;         // max prompt tokens the target states
  int http_status = 0;
  int reported_prompt_tokens = -1;  // usage.prompt_tokens; -1: none
  std::string tenant;
};
// A 200 past the advertised limit (boundary_accepted), and a 200 whose
// usage.prompt_tokens disagrees with what was sent (prompt_tokens_mismatch:
// a silently truncated or dropped prompt reports a different count).
std::vector<Finding> JudgeBoundary(const BoundaryObservation& o);

// Latency plausibility: time to first token against a prefill rate
// calibrated alone. ttft below base + 0.3 × per_token × prompt_tokens, where
// the prefill share is at least 1 ms, means the prompt was not prefilled.
struct LatencyModel {
  bool calibrated = false;
  double base_ms = 0;       // fastest first token for a one-unit prompt
  double per_token_ms = 0;  // prefill cost per prompt token
};
std::optional<Finding> JudgeLatency(const LatencyModel& model,
                                    int prompt_tokens, double ttft_ms,
                                    const std::string& tenant);

// Runs every detector (and the shadow ledger) on an input it must flag.
// detector -> fired. A detector that does not fire cannot be trusted.
std::map<std::string, bool> RunPositiveControls();

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_DETECTORS_H_
