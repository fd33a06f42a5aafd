// Golden: a fixed greedy prompt must get the answer it got alone, under
// any load. Another tenant's KV in its attention changes the answer; a
// divergence holding another tenant's marker is the leak itself. On a
// target whose answers differ alone or under same-tenant load (not
// batch-invariant), golden judges rates instead: divergence under
// cross-tenant load against a same-tenant baseline sent in slots
// interleaved with it; disabled where that test is blind.
#ifndef KVCANARY_AUDITOR_DETECTORS_GOLDEN_H_
#define KVCANARY_AUDITOR_DETECTORS_GOLDEN_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "auditor/result/finding.h"

namespace kvcanary::auditor {

// A greedy answer under load must equal the one recorded alone.
std::optional<Finding> CompareGolden(int variant, absl::string_view expected,
                                     absl::string_view got,
                                     const std::string& tenant);

// For a target that is not batch-invariant: the rate at which golden
// answers differ from the one recorded alone, under cross-tenant load vs
// under same-tenant load. A finding (golden_divergence_rate) when the
// cross-tenant rate exceeds the baseline by at least 5 points and by 3
// standard errors (two-proportion z-test, pooled), with at least 10 probes
// on each side.
std::optional<Finding> JudgeGoldenRates(int baseline_diverged, int baseline_n,
                                        int cross_diverged, int cross_n);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_DETECTORS_GOLDEN_H_
