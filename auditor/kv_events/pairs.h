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
#ifndef KVCANARY_AUDITOR_KV_EVENTS_PAIRS_H_
#define KVCANARY_AUDITOR_KV_EVENTS_PAIRS_H_

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "auditor/evidence/log.h"
#include "auditor/kv_events/ledger.h"
#include "auditor/kv_events/subscriber.h"
#include "auditor/reports/metrics.h"
#include "auditor/result/coverage.h"
#include "auditor/result/finding.h"
#include "auditor/target/prompts.h"
#include "auditor/target/target.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor::kv_events {

enum class PairVerdict { kShared, kIsolated, kSameHash, kInconclusive };
const char* PairVerdictName(PairVerdict v);

// What one pair's requests and windows showed.
// B's probe is P followed by a fresh suffix of its own, the witness: the
// blocks it stores (chained to P's last block, A's or B's own) show that
// B's request was served where the stream can see. Without them, silence
// about A's blocks could be a request served by another replica.
struct PairObservation {
  Span plant;    // from A's request to B's
  Span probe;    // from B's request to the control's
  Span after;    // from B's request to the end (control included)
  Span control;  // from the control's request to the end
  bool plant_ok = false, probe_ok = false, control_ok = false;  // HTTP 200s
  int probe_cached_tokens = -1;    // B's usage, -1: not reported
  int control_cached_tokens = -1;  // the control's (a cached template)
  double probe_ttft_ms = 0, control_ttft_ms = 0;
};

struct BlockCheck {
  std::string outcome;  // isolated, not_stored, same_hash
  BlockHash a_hash;
  std::optional<BlockHash> b_hash;
  int64_t a_seq = 0, b_seq = -1;
};

struct PairResult {
  int index = 0;
  PairVerdict verdict = PairVerdict::kInconclusive;
  std::string reason;  // why, in a sentence
  std::vector<BlockCheck> blocks;
  int isolated = 0, not_stored = 0, same_hash = 0;
  bool hit_signal = false;      // B's cached tokens or timing says it hit
  bool witness_stored = false;  // B's suffix stored: the stream saw B
  int epoch = 0;
  int64_t first_seq = -1, last_seq = -1;  // the window's sequence numbers
  int64_t probe_id = -1;                  // B's request
  int probe_cached_tokens = -1, control_cached_tokens = -1;
  double probe_ttft_ms = 0, control_ttft_ms = 0;
  nlohmann::json ToJson() const;
};

// Decides one pair (pure; the tests drive it with hand-made spans).
PairResult DecidePair(const PairObservation& o);

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

// Runs the pairs through `session` (A = writer, B = reader), recording each
// pair in `log` (may be null). Errors only where the target or the log
// failed; a pair that could not be judged is in the outcome as such.
absl::StatusOr<KvEventsOutcome> RunKvEventsProbes(
    Target& session, const AuditTenant& writer, const AuditTenant& reader,
    Subscriber& subscriber, Ledger& ledger, const KvEventsProbeOptions& options,
    const std::function<std::string(int units)>& fresh_prefix,
    EvidenceLog* log);

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
  // probe `prefix_units` letters (P and its witness); stops following the
  // stream after.
  absl::StatusOr<KvEventsOutcome> Run(Target& session,
                                      const AuditTenant& writer,
                                      const AuditTenant& reader,
                                      int prefix_units, EvidenceLog* log);

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
