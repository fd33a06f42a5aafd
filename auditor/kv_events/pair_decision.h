// The kv_events detector's decision on one probe pair (pairs.h describes
// the pairs and the rule): pure, from the spans of the shadow ledger
// (ledger.h) around the pair's requests and what the requests returned, so
// the tests drive it with hand-made spans.
#ifndef KVCANARY_AUDITOR_KV_EVENTS_PAIR_DECISION_H_
#define KVCANARY_AUDITOR_KV_EVENTS_PAIR_DECISION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "auditor/kv_events/ledger.h"
#include "auditor/kv_events/wire.h"
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
  Span plant;    // from A's request to B's (the eviction step's included)
  Span probe;    // from B's request to the control's
  Span after;    // from B's request to the end (control included)
  Span control;  // from the control's request to the end
  bool plant_ok = false, probe_ok = false, control_ok = false;  // HTTP 200s
  int probe_cached_tokens = -1;    // B's usage, -1: not reported
  int control_cached_tokens = -1;  // the control's (a cached template)
  double probe_ttft_ms = 0, control_ttft_ms = 0;
  // An eviction step ran after A's request; `evict_from` is where it began:
  // only the plant's entries before it are A's request's.
  bool evicted = false;
  bool evict_done = true;  // false: a filler failed, the plant may be in place
  Mark evict_from;
};

struct BlockCheck {
  std::string outcome;  // isolated, not_stored, same_hash
  BlockHash a_hash;
  std::optional<BlockHash> b_hash;
  int64_t a_seq = 0, b_seq = -1;
  // A's block had moved to a second tier before B's probe, stored there
  // under `tier_hash`.
  bool moved = false;
  std::optional<BlockHash> tier_hash;
};

struct PairResult {
  int index = 0;
  PairVerdict verdict = PairVerdict::kInconclusive;
  std::string reason;  // why, in a sentence
  std::vector<BlockCheck> blocks;
  int isolated = 0, not_stored = 0, same_hash = 0;
  // A's last blocks B's prompt could not hold (tokens after P, as a chat
  // template's closing markers), after one B stored again: not judged.
  int tail_blocks = 0;
  bool hit_signal = false;      // B's cached tokens or timing says it hit
  bool witness_stored = false;  // B's suffix stored: the stream saw B
  bool evicted = false;         // an eviction step ran before B's probe
  // A's blocks moved to a second tier (`tier_medium`) in the window, and of
  // those moved before B's probe, how many B's request was served from it.
  int moved = 0, promoted = 0;
  std::string tier_medium;
  int tier_rehashed = 0;  // moved blocks the tier keyed other than A's hash
  int epoch = 0;
  int64_t first_seq = -1, last_seq = -1;  // the window's sequence numbers
  int64_t probe_id = -1;                  // B's request
  int probe_cached_tokens = -1, control_cached_tokens = -1;
  double probe_ttft_ms = 0, control_ttft_ms = 0;
  nlohmann::json ToJson() const;
};

// Decides one pair (pure; the tests drive it with hand-made spans).
PairResult DecidePair(const PairObservation& o);

}  // namespace kvcanary::auditor::kv_events

#endif  // KVCANARY_AUDITOR_KV_EVENTS_PAIR_DECISION_H_
