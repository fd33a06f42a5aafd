// cache_refusal: a prefix cache shared across tenants, seen through the
// refusals it causes. An engine whose pages carry their writer (ours under
// --watermark=enforce) refuses a request that would attend over another
// tenant's cached prefix; so do gateways that reject a request whose cache
// hit crosses a tenant boundary. After the load, per round, a writer tenant
// primes a fresh prefix and a reader tenant then sends either that prefix
// (cross) or a never-seen one (control) with a short suffix, in random
// order; the reader's cross probes failing more often than its controls
// (one-sided Fisher exact test at kRefusalAlpha) answers "did the writer
// send this?" — the evidence `cache-audit` reads from the same refusals
// (docs/cache-audit.md), so `probe` and `cache-audit` agree on one engine.
#ifndef KVCANARY_AUDITOR_DETECTORS_CACHE_REFUSAL_H_
#define KVCANARY_AUDITOR_DETECTORS_CACHE_REFUSAL_H_

#include <optional>
#include <set>
#include <string>

#include "auditor/result/finding.h"

namespace kvcanary::auditor {

// A finding's false-alarm probability per campaign.
inline constexpr double kRefusalAlpha = 1e-3;

// The rounds' counts: the reader's probes after a usable prime.
struct RefusalRounds {
  int cross = 0, cross_failed = 0;
  int control = 0, control_failed = 0;
  std::set<std::string> writers, readers;  // of the failed cross probes
};

// cross_tenant_cache_refusal when the cross probes fail more often than
// the controls at `alpha`; nothing otherwise.
std::optional<Finding> JudgeRefusals(const RefusalRounds& r, double alpha);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_DETECTORS_CACHE_REFUSAL_H_
