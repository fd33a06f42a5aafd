// `kvcanary-auditor cache-audit`: does the target's prompt cache let one
// tenant's prompt speed up — and so reveal itself to — another tenant? The
// timing method of published prompt-cache audits (Gu et al., ICML 2025):
// tenant A primes a fresh random prefix, tenant B sends the same prefix,
// against controls of never-seen prefixes; the two time-to-first-token
// samples are compared with a two-sample Kolmogorov–Smirnov test at a
// stated significance. The same-tenant case (A then A) is the positive
// control. Where the target reports cached tokens, that is a second,
// direct signal. Sharing found: cross-tenant (findings, 1), same-tenant
// (isolation holds: clean, 0), none (no cache signal at all: inconclusive,
// 3 — the test could not show it can see a hit).
#ifndef KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_CACHE_AUDIT_H_
#define KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_CACHE_AUDIT_H_

#include <cstdint>
#include <string>

#include "auditor/audits/cache_audit/salts.h"
#include "auditor/kv_events/pairs.h"
#include "auditor/reports/metrics.h"
#include "auditor/result/result.h"
#include "auditor/target/target.h"

namespace kvcanary::auditor {

struct CacheAuditOptions {
  TargetOptions target;  // at least two tenants: A and B
  std::string db_path;
  double alpha = 1e-6;    // the KS test's significance
  int max_samples = 400;  // per arm, at most
  int prefix_tokens = 0;  // the primed prefix; 0: sized from the limit
  // --evict-tokens: after each prime, the writer sends cache-busted filler
  // prompts of at least this many tokens in all, so the prime leaves the
  // first cache tier (GPU pages) before the probe and a hit can only come
  // from a second tier (host memory, LMCache, HiCache). 0: none. -1: from
  // the tiers the target states (auditor/target/cache_tiers.h). Where the
  // target states a second tier that these fillers do not reach, the
  // result is inconclusive unless it has findings.
  int evict_tokens = -1;
  uint64_t seed = 0;  // prompts' letters and arm order; 0: random
  bool progress = true;
  // The target engine's KV-cache event stream (--kv-events): adds the
  // kv_events detector (auditor/kv_events/pairs.h). Empty endpoint: none.
  kv_events::SubscriberOptions kv_events;
  // --salts: the salt checks (salts.h) instead of A against B; `salt`
  // holds the gateway check's header and tenant.
  bool salts = false;
  SaltOptions salt;
};

// Runs the audit to its verdict; errors (exit 2) are in the result, e.g.
// a tenant's key refused (HTTP 401/403) at any point, naming the tenant.
// Blocking; call from one thread (the target is sent one request at a
// time, which the timing needs).
CampaignResult RunCacheAudit(const CacheAuditOptions& options,
                             AuditorMetrics* metrics);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_CACHE_AUDIT_H_
