// The kv_events detector: white-box evidence of cross-tenant KV sharing from
// an engine's own KV-cache event stream (auditor/kv_events/subscriber.h),
// tied to the auditor's probes. Per probe pair:
//   1. tenant A sends a fresh prefix P of several blocks (the plant): the
//      blocks it stores, and the digests of their token ids, are A's;
//   2. tenant B sends exactly P;
//   3. tenant B sends a fresh prefix of its own (the control): it must
//      store blocks, or silence cannot be told from a hit.
// Then, for each of A's blocks, what B's request did with the same tokens:
//   stored under another hash  -> isolated (the engine salts per tenant);
//   not stored at all          -> served from A's block: shared (vLLM's
//                                 default mode emits nothing for a hit);
//   stored under A's very hash -> the engine reports hits as stores, or its
//                                 hashes ignore the salt while its cache is
//                                 isolated (a past SGLang behaviour): shared
//                                 only where B's cached tokens or timing
//                                 agree, else unproven either way.
// A pair whose window has a sequence gap that replay did not recover, a
// publisher restart, an eviction of A's blocks, or no control store is
// inconclusive: never judged from a window the auditor did not see whole.
//
// A second tier (a host-memory or disk tier behind the prefix cache:
// SGLang HiCache, vLLM's CPU offload, LMCache) publishes under its own
// `medium` (ledger.h). To audit it the caller passes an eviction step that
// pushes A's plant out of the first tier between steps 1 and 2 (filler
// requests); the plant window then runs up to B's probe. A first-tier
// removal of A's block followed by a second-tier store of the same tokens
// is a move, not a loss: the pair stays judgeable. A removal with no such
// store, a clear, or the tier dropping its copy before B's probe is still
// inconclusive. Once A's blocks were moved, B's first-tier store of the
// same tokens under its own hash is a recompute or a promotion (a tier hit
// copied back under the requester's keys), which the events cannot tell
// apart: B's cached tokens decide (beyond its control's, covering the moved
// blocks: shared; none: isolated), or where the target reports none, its
// first-token time (a hit: shared; else isolated). A tier that stored A's
// blocks under hashes other than A's first-tier ones is noted (it keys
// blocks differently, as one that drops the salt does), not judged by
// itself. The decision itself, pure: pair_decision.h.
#ifndef KVCANARY_AUDITOR_KV_EVENTS_PAIRS_H_
#define KVCANARY_AUDITOR_KV_EVENTS_PAIRS_H_

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "auditor/evidence/log.h"
#include "auditor/kv_events/ledger.h"
#include "auditor/kv_events/pair_decision.h"
#include "auditor/kv_events/subscriber.h"
#include "auditor/reports/metrics.h"
#include "auditor/result/coverage.h"
#include "auditor/result/finding.h"
#include "auditor/target/prompts.h"
#include "auditor/target/target.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor::kv_events {

struct KvEventsProbeOptions {
  int pairs = 3;
  // Random letters in B's probe, P and its witness together (P about
  // half): several blocks each on any engine.
  int prefix_units = 48;
  bool report_full = false;  // requests carry kv_cache_report_mode "full"
  absl::Duration settle_quiet = absl::Milliseconds(150);
  absl::Duration settle_max = absl::Seconds(3);
};

struct KvEventsOutcome {
  std::string writer, reader;
  std::string endpoint;
  int requested_pairs = 0;
  std::vector<PairResult> pairs;
  LedgerStats stream;
  std::vector<std::string> notes;
  int Count(PairVerdict v) const;
  int shared() const { return Count(PairVerdict::kShared); }
  int isolated() const { return Count(PairVerdict::kIsolated); }
  int block_pairs_checked() const;
  nlohmann::json ToJson() const;
};

// A step between A's plant and B's probe, e.g. filler requests that push
// the plant out of the first tier into a second: false when it did not
// complete (a filler unanswered: that pair cannot be judged), an error to
// stop the run.
using EvictStep = std::function<absl::StatusOr<bool>()>;

// Runs the pairs through `session` (A = writer, B = reader), recording each
// pair in `log` (may be null). `evict` (empty: none) runs after A's plant
// and before B's probe in every pair. Errors only where the target,
// `evict` or the log failed; a pair that could not be judged is in the
// outcome as such.
absl::StatusOr<KvEventsOutcome> RunKvEventsProbes(
    Target& session, const AuditTenant& writer, const AuditTenant& reader,
    Subscriber& subscriber, Ledger& ledger, const KvEventsProbeOptions& options,
    const std::function<std::string(int units)>& fresh_prefix, EvidenceLog* log,
    const EvictStep& evict = nullptr);

// The detector's coverage, judged for the writer and the reader: one judged
// pair per requested pair; a pair not judged is a failure naming why.
DetectorCoverage KvEventsCoverage(const KvEventsOutcome& o);
// The stream's counts as the auditor's metrics take them.
KvEventStreamCounts StreamCounts(const LedgerStats& s);
// One finding per shared pair (kind cross_tenant_kv_block_hit).
std::vector<Finding> KvEventsFindings(const KvEventsOutcome& o);

// The detector as a command runs it: follows the stream from Start() (so
// its counts cover the whole command), runs the pairs when asked, with
// fresh prefixes of random letters behind a cache-busting nonce.
class KvEventsCheck {
 public:
  explicit KvEventsCheck(SubscriberOptions options);
  // Connects (kUnavailable / kPermissionDenied: the stream cannot be
  // followed, and the command cannot run what it was asked to).
  absl::Status Start();
  // The pairs (options' pairs) between tenants `writer` and `reader`, B's
  // probe `prefix_units` letters (P and its witness), `evict` between each
  // plant and probe (as RunKvEventsProbes); stops following the stream
  // after.
  absl::StatusOr<KvEventsOutcome> Run(Target& session,
                                      const AuditTenant& writer,
                                      const AuditTenant& reader,
                                      int prefix_units, EvidenceLog* log,
                                      const EvictStep& evict = nullptr);

 private:
  std::string FreshPrefix(int units);

  const SubscriberOptions options_;
  Ledger ledger_;
  Subscriber subscriber_;
  std::mt19937_64 rng_;
  CacheBuster buster_;
};

}  // namespace kvcanary::auditor::kv_events

#endif  // KVCANARY_AUDITOR_KV_EVENTS_PAIRS_H_
