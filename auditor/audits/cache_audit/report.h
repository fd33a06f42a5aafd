// What `cache-audit` (auditor/audits/cache_audit/cache_audit.h) measured, and
// how it is reported: the two detectors' coverage (cache_timing,
// cached_tokens), the command's own result document (`cache_audit`,
// docs/cache-audit.md) and its checks. Pure functions of the measurement, so
// every wording and state is testable without a target.
#ifndef KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_REPORT_H_
#define KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "auditor/audits/cache_audit/decision.h"
#include "auditor/result/coverage.h"
#include "auditor/result/result.h"
#include "auditor/target/cache_tiers.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// How the prefix was sized: prompt tokens ~ base + units x unit_tokens.
struct CacheSizing {
  int target_tokens = 0;  // what the prefix was sized for
  int units = 0;          // random letters after the unique start
  double unit_tokens = 1, base_tokens = 0;
  bool counts_reported = false;  // from usage.prompt_tokens, not a guess
};

struct CacheAuditOutcome {
  std::string writer, reader;  // tenants A and B
  int max_samples = 0;
  LookPlan plan;
  CacheSizing sizing;
  int prefix_tokens = 0;  // median prompt tokens of the primes
  ArmSamples arms[kCacheArms];
  LookTests tests;  // at the last look taken
  CachedTokensSignal cached;
  // Where the counts came from (CachedTokensFromName): the
  // prompt_tokens_details field, or llama.cpp's timings.prompt_n.
  std::string cached_from = "not reported";
  std::optional<SharingLevel> level;  // unset: the run stopped early
  // Signals that found B reading A's prefix: cache_timing, cached_tokens,
  // cache_refusal (B's probes of A's prefixes refused more than misses).
  std::vector<std::string> fired;
  std::vector<std::string> notes;  // sizing notes
  int64_t requests = 0;
  // --evict-tokens: the filler requests sent after primes, and their tokens
  // (as sized: the prime's length each). `evict_tokens` is the flag's, or
  // where none was given the default from the tiers the target states.
  int evict_tokens = 0;
  std::string evict_from;  // "--evict-tokens", or where the default came from
  CacheTiers tiers;        // as the target states them
  int64_t evict_requests = 0, evicted_tokens = 0;
  int rounds = 0;
  int looks_taken = 0;
  double seconds = 0;
};

DetectorCoverage CacheTimingCoverage(const CacheAuditOutcome& o);
DetectorCoverage CachedTokensCoverage(const CacheAuditOutcome& o);
// The command's `details` (the result document's `cache_audit`): the plain
// fields first for people, then arms, tests, the cached-token signal, the
// plan and the sizing.
nlohmann::json CacheAuditDetails(const CacheAuditOutcome& o);
// cache_hit_visible (A then A) and cross_tenant_isolation (A then B).
std::vector<Check> CacheAuditChecks(const CacheAuditOutcome& o);
// The finding of `signal`, high, writer A, reader B: cache_timing or
// cached_tokens give cross_tenant_cache_hit (detector: the signal), for
// cached_tokens the first cross-tenant probe the target said it served
// from cache (`probe_ids`: the cross arm's probe numbers, per usable
// sample); cache_refusal gives cross_tenant_cache_refusal (detector
// cache_timing, whose probes were refused; `probe_ids`: the failed cross
// probes, the first named).
Finding CrossTenantFinding(const CacheAuditOutcome& o,
                           const std::string& signal,
                           const std::vector<int64_t>& probe_ids);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_REPORT_H_
