// One cache-audit run (auditor/audits/cache_audit/cache_audit.h's
// RunCacheAudit) as a class, for the two files its steps are split into:
// cache_audit.cc (the course of the audit: start, the tiers, the pairs, the
// verdict) and cache_audit_probes.cc (its requests: sizing, an arm's sample
// with its prime and fillers, rounds, looks). Internal to
// auditor/audits/cache_audit/.
#ifndef KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_CACHE_AUDIT_INTERNAL_H_
#define KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_CACHE_AUDIT_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "auditor/audits/cache_audit/cache_audit.h"
#include "auditor/audits/cache_audit/report.h"
#include "auditor/audits/cache_audit/salts.h"
#include "auditor/campaign/calibrate.h"
#include "auditor/evidence/log.h"
#include "auditor/kv_events/pairs.h"
#include "auditor/reports/metrics.h"
#include "auditor/result/result.h"
#include "auditor/target/completion.h"
#include "auditor/target/target.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor::cache_audit_internal {

using json = nlohmann::json;

// What a request of the audit is for: its evidence kind (kRequestKinds in
// cache_audit_probes.cc).
enum class RequestKind { kSizing, kControl, kPrime, kSame, kCross, kEvict };

// One audit: sizes the prefix, samples rounds of the four arms, looks at
// the tests on the plan's schedule, and reports.
// Not thread-safe; owned by the command's thread for one Run().
class CacheAudit {
 public:
  CacheAudit(const CacheAuditOptions& o, AuditorMetrics* metrics)
      : o_(o),
        metrics_(metrics),
        session_(o.target),
        rng_(o.seed != 0 ? o.seed : std::random_device{}()) {}

  CampaignResult Run();

 private:
  const AuditTenant& tenant(int i) const { return party_[i]; }

  absl::Status Steps();
  absl::Status Start();
  // Rounds and looks until a level; then the findings of what fired.
  absl::Status RunPair();
  // --salts: each pair run in turn (salts.h).
  absl::Status RunSaltPairs();
  absl::Status Size();
  // The cache tiers the target states, --evict-tokens (the flag's, or its
  // default from them), and a problem where a second tier goes unchecked.
  void Tiers();
  // The kv_events probe pairs, where a stream was given.
  absl::Status KvEvents();
  absl::Status Sample(CacheArm arm, int round);
  // --evict-tokens: the fillers after a prime. The first one that fails
  // (its HTTP status, 0 for none, in *failed) ends them: the prime may
  // still be cached in the first tier, so the sample cannot count.
  absl::Status Evict(int round, std::optional<int>* failed);
  absl::Status Round(int round);
  // Runs the tests at look `look`; sets the level when they decide.
  absl::Status Look(size_t look, bool last);
  bool TooManyFailures() const;
  Completion Send(RequestKind kind, int who, const std::string& prompt,
                  int round, int64_t* probe_id);
  std::string Prefix(int units);
  std::string Suffix();
  int PrefixTokens() const;
  absl::Status AddFinding(Finding f);
  absl::Status KeyCheck(const Completion& c, int who) const;
  void Progress(const std::string& line) const;
  void Finish(const absl::Status& run);

  absl::Status Record(const std::string& kind, json body, bool flush = false) {
    return log_ == nullptr ? absl::OkStatus()
                           : log_->Record(kind, std::move(body), flush);
  }

  const CacheAuditOptions& o_;
  AuditorMetrics* metrics_;
  Target session_;
  std::mt19937_64 rng_;
  CacheBuster buster_;
  std::unique_ptr<EvidenceLog> log_;
  CacheAuditOutcome out_;
  // Who sends as A (0) and B (1): the first two tenants, or (--salts) the
  // pair being run.
  AuditTenant party_[2];
  std::vector<SaltPair> salt_pairs_;
  std::vector<SaltPairOutcome> salt_out_;
  const SaltPair* pair_ = nullptr;         // --salts: the pair being run
  std::vector<int64_t> cross_probe_ids_;   // per usable cross sample
  std::vector<int64_t> cross_failed_ids_;  // cross probes without an answer
  std::vector<int> prime_tokens_;
  int64_t next_probe_ = 0;
  std::vector<int64_t> probe_times_, error_times_;
  std::optional<kv_events::KvEventsOutcome> kv_out_;
  // Why the run cannot vouch for what it checked (a second tier its
  // fillers never reach): inconclusive unless there are findings.
  std::vector<std::string> problems_;
  CampaignResult r_;
};

}  // namespace kvcanary::auditor::cache_audit_internal

#endif  // KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_CACHE_AUDIT_INTERNAL_H_
