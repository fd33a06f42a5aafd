#include "auditor/kv_events/pair_decision.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvcanary::auditor::kv_events {
namespace {

using json = nlohmann::json;

// B's first token this much faster than its control's: a hit, by timing.
constexpr double kHitTimingRatio = 0.5;
// Block checks kept per pair in evidence and reports.
constexpr size_t kBlocksShown = 8;

std::string BreakText(const Break& b) {
  switch (b.kind) {
    case Break::kGap:
      return absl::StrFormat(
          "messages %d-%d were lost and the replay socket did not resend "
          "them",
          b.from_seq, b.to_seq);
    case Break::kRestart:
      return absl::StrFormat(
          "the publisher restarted (sequence %d after %d): its cache may be "
          "gone",
          b.to_seq, b.from_seq);
    case Break::kUndecodable:
      return absl::StrCat("message ", b.from_seq,
                          " did not decode: ", b.detail);
    case Break::kTruncated:
      return "the ledger dropped the window's oldest events";
  }
  return "?";
}

// Why a span is not whole ("" when it is).
std::string NotWhole(const Span& s) {
  if (s.truncated) return "the ledger dropped the window's oldest events";
  for (const Break& b : s.breaks) {
    if (!(b.kind == Break::kGap && b.recovered)) return BreakText(b);
  }
  return "";
}

PairResult Inconclusive(PairResult r, std::string why) {
  r.verdict = PairVerdict::kInconclusive;
  r.reason = std::move(why);
  return r;
}

// B's first token this much faster than its control's.
bool TimingHit(double probe_ttft_ms, double control_ttft_ms) {
  return probe_ttft_ms > 0 && control_ttft_ms > 0 &&
         probe_ttft_ms < kHitTimingRatio * control_ttft_ms;
}

void SetWindow(const PairObservation& o, PairResult& r) {
  r.epoch = o.after.to.epoch;
  r.first_seq = o.plant.from.seq + 1;
  r.last_seq = o.after.to.seq;
  r.probe_cached_tokens = o.probe_cached_tokens;
  r.control_cached_tokens = o.control_cached_tokens;
  r.probe_ttft_ms = o.probe_ttft_ms;
  r.control_ttft_ms = o.control_ttft_ms;
  r.hit_signal = o.probe_cached_tokens > 0 ||
                 TimingHit(o.probe_ttft_ms, o.control_ttft_ms);
  r.evicted = o.evicted;
}

// What became of A's blocks after A's request, per block (plant order): the
// second tier's copy of its tokens (stored after the first-tier removal, or
// before it by a write-through tier; null: not moved), and whether that
// move came before B's probe.
struct PlantFate {
  std::vector<const BlockEntry*> copy;
  std::vector<bool> before_probe;
};

// Checks A's blocks against B's first-tier stores after B's request (a
// second tier's copy is no store of B's).
void CheckBlocks(const std::vector<const BlockEntry*>& plant,
                 const PlantFate& fate, const Span& after, PairResult& r) {
  absl::flat_hash_map<uint64_t, std::vector<const BlockEntry*>> stores;
  for (const BlockEntry& e : after.entries) {
    if (e.type == EventType::kBlockStored && e.token_digest != 0 &&
        FirstTier(e.medium)) {
      stores[e.token_digest].push_back(&e);
    }
  }
  for (size_t i = 0; i < plant.size(); ++i) {
    const BlockEntry* a = plant[i];
    BlockCheck c;
    c.a_hash = a->hash;
    c.a_seq = a->seq;
    if (fate.copy[i] != nullptr) {
      c.moved = fate.before_probe[i];
      c.tier_hash = fate.copy[i]->hash;
    }
    const auto it = stores.find(a->token_digest);
    const BlockEntry* other = nullptr;
    const BlockEntry* same = nullptr;
    if (it != stores.end()) {
      for (const BlockEntry* b : it->second) {
        if (b->hash == a->hash) {
          if (same == nullptr) same = b;
        } else if (other == nullptr) {
          other = b;
        }
      }
    }
    if (other != nullptr) {
      c.outcome = "isolated";
      c.b_hash = other->hash;
      c.b_seq = other->seq;
      ++r.isolated;
    } else if (same != nullptr) {
      c.outcome = "same_hash";
      c.b_hash = same->hash;
      c.b_seq = same->seq;
      ++r.same_hash;
    } else {
      c.outcome = "not_stored";
      ++r.not_stored;
    }
    r.blocks.push_back(std::move(c));
  }
}

}  // namespace

const char* PairVerdictName(PairVerdict v) {
  switch (v) {
    case PairVerdict::kShared:
      return "shared";
    case PairVerdict::kIsolated:
      return "isolated";
    case PairVerdict::kSameHash:
      return "same_hash";
    case PairVerdict::kInconclusive:
      return "inconclusive";
  }
  return "?";
}

namespace {

// Whether B's probe stored a block of its witness suffix: a block of tokens
// none of A's blocks hold, whose parent is one of A's blocks (B was served
// them) or a block B stored with the tokens of one of A's (B's own copy).
// A stranger's request never chains to P, which only A and B sent.
bool WitnessStored(const std::vector<const BlockEntry*>& plant,
                   const Span& probe) {
  absl::flat_hash_set<uint64_t> a_digests;
  absl::flat_hash_set<BlockHash> heads;
  for (const BlockEntry* a : plant) {
    a_digests.insert(a->token_digest);
    heads.insert(a->hash);
  }
  for (const BlockEntry& e : probe.entries) {
    if (e.type == EventType::kBlockStored && a_digests.contains(e.token_digest))
      heads.insert(e.hash);
  }
  for (const BlockEntry& e : probe.entries) {
    if (e.type == EventType::kBlockStored &&
        !a_digests.contains(e.token_digest) && e.parent.has_value() &&
        heads.contains(*e.parent)) {
      return true;
    }
  }
  return false;
}

constexpr char kPlantLost[] =
    "A's blocks were evicted or cleared before B's request could be judged "
    "against them";

// How many of the plant's entries are A's request's; the rest are the
// eviction step's. REQUIRES: the plant is not truncated.
size_t PlantEnd(const PairObservation& o) {
  if (!o.evicted) return o.plant.entries.size();
  const uint64_t n = o.evict_from.index > o.plant.from.index
                         ? o.evict_from.index - o.plant.from.index
                         : 0;
  return std::min<size_t>(o.plant.entries.size(), n);
}

// A's blocks: the first-tier stores of A's request, with their token ids
// (into `plant`). Why there are none, or "".
std::string APlant(const PairObservation& o,
                   std::vector<const BlockEntry*>* plant) {
  bool stored_without_tokens = false;
  for (size_t i = 0; i < PlantEnd(o); ++i) {
    const BlockEntry& e = o.plant.entries[i];
    if (e.type != EventType::kBlockStored || !FirstTier(e.medium)) continue;
    if (e.token_digest == 0) {
      stored_without_tokens = true;
    } else {
      plant->push_back(&e);
    }
  }
  if (!plant->empty()) return "";
  return stored_without_tokens
             ? "the plant's stored blocks carry no token ids (or not "
               "block_size of them each): B's cannot be matched to them"
             : "no block was stored for A's plant (prefix caching off, a "
               "prompt shorter than a block, or a silent stream)";
}

// Follows A's blocks from A's request on (the eviction step, then B's
// requests) into `fate`. A first-tier removal of A's block with a
// second-tier store of its tokens is a move, the store after the removal
// (a spill, as ours and LMCache's eviction path) or before it (a
// write-through tier); why the pair cannot be judged ("" when it can): a
// clear, a removal without such a store, or the tier's copy removed too
// before B's probe (nothing left to probe).
std::string FollowPlant(const PairObservation& o,
                        const std::vector<const BlockEntry*>& plant,
                        PlantFate* fate) {
  // From A's own request on: a write-through tier stores its copy there.
  std::vector<const BlockEntry*> events;
  for (const BlockEntry& e : o.plant.entries) events.push_back(&e);
  const size_t probe_at = events.size();
  for (const BlockEntry& e : o.after.entries) events.push_back(&e);
  absl::flat_hash_map<BlockHash, size_t> by_hash, by_copy;
  absl::flat_hash_map<uint64_t, std::vector<size_t>> by_digest;
  for (size_t i = 0; i < plant.size(); ++i) {
    by_hash.emplace(plant[i]->hash, i);
    by_digest[plant[i]->token_digest].push_back(i);
  }
  fate->copy.assign(plant.size(), nullptr);
  fate->before_probe.assign(plant.size(), false);
  std::vector<bool> removed(plant.size(), false);
  // A second-tier copy stored while the block was still in the first tier.
  std::vector<const BlockEntry*> early(plant.size(), nullptr);
  for (size_t at = 0; at < events.size(); ++at) {
    const BlockEntry& e = *events[at];
    if (e.type == EventType::kAllBlocksCleared) return kPlantLost;
    if (e.type == EventType::kBlockRemoved && FirstTier(e.medium)) {
      const auto it = by_hash.find(e.hash);
      if (it == by_hash.end()) continue;
      const size_t i = it->second;
      removed[i] = true;
      if (early[i] != nullptr && fate->copy[i] == nullptr) {
        fate->copy[i] = early[i];
        fate->before_probe[i] = at < probe_at;
      }
    } else if (e.type == EventType::kBlockStored && !FirstTier(e.medium)) {
      const auto it = by_digest.find(e.token_digest);
      if (e.token_digest == 0 || it == by_digest.end()) continue;
      for (size_t i : it->second) {
        if (fate->copy[i] != nullptr) continue;
        if (!removed[i]) {
          if (early[i] == nullptr) early[i] = &e;
        } else {
          fate->copy[i] = &e;
          fate->before_probe[i] = at < probe_at;
        }
        by_copy.emplace(e.hash, i);
      }
    } else if (e.type == EventType::kBlockRemoved && at < probe_at &&
               by_copy.contains(e.hash)) {
      return absl::StrCat("A's blocks were moved to the ", MediumName(e.medium),
                          " tier and removed from it too before B's request "
                          "could be judged against them");
    }
  }
  for (size_t i = 0; i < plant.size(); ++i) {
    if (removed[i] && fate->copy[i] == nullptr) return kPlantLost;
  }
  return "";
}

// Why the pair cannot be judged ("" when it can); A's blocks in `plant`,
// what became of them in `fate`.
std::string CannotJudge(const PairObservation& o,
                        std::vector<const BlockEntry*>* plant,
                        PlantFate* fate) {
  if (!o.plant_ok || !o.probe_ok || !o.control_ok) {
    return "a request of the pair was not answered with a completion";
  }
  for (const Span* s : {&o.plant, &o.after}) {
    if (std::string why = NotWhole(*s); !why.empty()) return why;
  }
  if (o.evicted && !o.evict_done) {
    return "the eviction step after A's plant did not complete (a filler "
           "request failed): A's blocks may still be in the first tier";
  }
  if (std::string why = APlant(o, plant); !why.empty()) return why;
  if (std::string why = FollowPlant(o, *plant, fate); !why.empty()) {
    return why;
  }
  bool control_stored = false;
  for (const BlockEntry& e : o.control.entries) {
    control_stored = control_stored || e.type == EventType::kBlockStored;
  }
  if (!control_stored) {
    return "B's control prefix stored no block: silence after B's request "
           "cannot be told from a hit";
  }
  return "";
}

// Counts A's blocks moved to a second tier, and those the tier keyed under
// a hash other than A's first-tier one.
void CountMoves(const std::vector<const BlockEntry*>& plant,
                const PlantFate& fate, PairResult& r) {
  for (size_t i = 0; i < fate.copy.size() && i < plant.size(); ++i) {
    const BlockEntry* copy = fate.copy[i];
    if (copy == nullptr) continue;
    ++r.moved;
    if (r.tier_medium.empty()) r.tier_medium = MediumName(copy->medium);
    if (copy->hash != plant[i]->hash) ++r.tier_rehashed;
  }
}

// B stored none of A's blocks, and the stream showed no block of B's
// witness either: shared only where the target's own count of B's cached
// tokens covers A's blocks beyond what its control had cached (a cached
// chat template or system prompt, on any replica); else the result says
// why it cannot judge.
PairResult UnwitnessedSilence(PairResult r,
                              const std::vector<const BlockEntry*>& plant) {
  const int64_t block_size = plant.front()->block_size;
  const int64_t covered = r.not_stored * block_size;
  const int64_t beyond = std::max(0, r.control_cached_tokens);
  if (block_size > 0 && r.probe_cached_tokens >= beyond + covered) {
    r.verdict = PairVerdict::kShared;
    r.reason = absl::StrCat(
        "B's request stored nothing the stream shows, not even its own "
        "suffix, but the target reported ",
        r.probe_cached_tokens, " cached tokens for it (its control ", beyond,
        "): at least the ", covered, " tokens of A's ", r.not_stored,
        " blocks");
    return r;
  }
  return Inconclusive(
      std::move(r),
      "B's request stored no block of its own suffix (the witness, chained "
      "to P): it may have been served by a replica whose stream is not "
      "followed, so silence about A's blocks cannot be told from a hit");
}

// A's blocks that had moved to a second tier before B's probe and that B's
// request stored again under its own hashes: each a recompute or a
// promotion, which the events cannot tell apart.
int MovedAndStoredAgain(const PairResult& r) {
  return static_cast<int>(std::count_if(
      r.blocks.begin(), r.blocks.end(),
      [](const BlockCheck& c) { return c.moved && c.outcome == "isolated"; }));
}

// B's stores of `n` moved blocks, judged by its hit signal: its cached
// tokens beyond its control's covering them (promoted: shared), covering
// part of them (inconclusive), none (recomputed: nullopt, judged as any
// pair); with no count, its first-token time (a hit: shared; else nullopt).
std::optional<PairResult> JudgePromotion(PairResult r, int n,
                                         int64_t block_size) {
  const std::string tier = r.tier_medium;
  std::string hit;
  if (r.probe_cached_tokens >= 0) {
    const int64_t beyond =
        r.probe_cached_tokens - std::max(0, r.control_cached_tokens);
    if (beyond <= 0) return std::nullopt;
    if (beyond < n * block_size) {
      return Inconclusive(
          std::move(r),
          absl::StrFormat("A's %d blocks had moved to the %s tier and B "
                          "stored them under its own hashes, but B's %d "
                          "cached tokens beyond its control's cover only "
                          "part of their %d tokens",
                          n, tier, beyond, n * block_size));
    }
    hit = absl::StrFormat(
        "it reported %d cached tokens (its control %d), covering the %d "
        "tokens of A's %d blocks moved there before B's request",
        r.probe_cached_tokens, std::max(0, r.control_cached_tokens),
        n * block_size, n);
  } else if (TimingHit(r.probe_ttft_ms, r.control_ttft_ms)) {
    hit = absl::StrFormat(
        "no cached-token count, but its first token came in %.1f ms against "
        "its control's %.1f ms, for A's %d blocks moved there before B's "
        "request",
        r.probe_ttft_ms, r.control_ttft_ms, n);
  } else {
    return std::nullopt;
  }
  r.verdict = PairVerdict::kShared;
  r.promoted = n;
  r.reason = absl::StrCat("B's request was served A's blocks from the ", tier,
                          " tier: ", hit, ", promoted under B's hashes");
  return r;
}

// The note on a tier that keyed A's blocks under other hashes than A's.
PairResult NoteTierHashes(PairResult r) {
  if (r.tier_rehashed == 0) return r;
  absl::StrAppend(
      &r.reason, " (note: the ", r.tier_medium, " tier stored ",
      r.tier_rehashed,
      " of A's blocks under hashes other than A's first-tier ones: it keys "
      "blocks differently, as a tier that drops the salt does)");
  return r;
}

// Decides a pair that can be judged, from its block checks.
PairResult Judge(PairResult r, const std::vector<const BlockEntry*>& plant,
                 const PairObservation& o) {
  const int again = MovedAndStoredAgain(r);
  if (again > 0) {
    std::optional<PairResult> promoted =
        JudgePromotion(r, again, plant.front()->block_size);
    if (promoted.has_value()) return *std::move(promoted);
  }
  if (r.not_stored > 0 && r.isolated == 0) {
    if (o.probe_cached_tokens == 0) {
      return Inconclusive(std::move(r),
                          "B stored none of A's blocks, but the target "
                          "reported 0 cached tokens for B's request");
    }
    // (An engine may also decline to cache what a flagged request
    // computed, as ours does after a watermark violation.)
    if (!r.witness_stored) return UnwitnessedSilence(std::move(r), plant);
    r.verdict = PairVerdict::kShared;
    r.reason = absl::StrCat(
        "B's request stored none of ", r.not_stored,
        " blocks of the same tokens: it was served A's cached blocks");
    return r;
  }
  if (r.isolated > 0 && r.not_stored == 0 && r.same_hash == 0) {
    r.verdict = PairVerdict::kIsolated;
    r.reason = absl::StrCat("B stored all ", r.isolated,
                            " blocks again under hashes of its own");
    if (again > 0) {
      absl::StrAppend(&r.reason, "; ", again, " of them had moved to the ",
                      r.tier_medium, " tier, and B's request ",
                      r.probe_cached_tokens >= 0
                          ? "reported no cached tokens beyond its control's"
                          : "was no faster than its control",
                      ": a recompute, not a promotion");
    }
    return r;
  }
  if (r.same_hash > 0 && r.isolated == 0 && r.not_stored == 0) {
    if (r.hit_signal) {
      r.verdict = PairVerdict::kShared;
      r.reason = absl::StrCat(
          "B's ", r.same_hash,
          " blocks were reported under A's hashes and its request hit the "
          "cache (cached tokens or first-token time)");
    } else {
      r.verdict = PairVerdict::kSameHash;
      r.reason =
          "B's blocks were stored under A's very hashes, with no cached-token "
          "or timing sign of a hit: the engine's event hashes ignore the "
          "tenant (as past SGLang's did); sharing is not shown and isolation "
          "is not proven by the events";
    }
    return r;
  }
  return Inconclusive(
      std::move(r),
      absl::StrFormat("B's blocks were mixed (%d stored under other hashes, "
                      "%d not stored, %d under A's hashes)",
                      r.isolated, r.not_stored, r.same_hash));
}

// A's last blocks, after the last one B stored again under its own
// hashes, that B did not store at all: tokens A's prompt had after P that
// B's does not (a chat template's closing markers: B's prompt goes on with
// its witness instead). In a chained prefix cache a block after one of B's
// own can never be A's block served to B, so they are dropped from the
// pair, not judged (`tail_blocks` counts them).
void DropPromptTail(std::vector<const BlockEntry*>* plant, PlantFate* fate,
                    PairResult& r) {
  size_t end = r.blocks.size();
  while (end > 0 && r.blocks[end - 1].outcome == "not_stored" &&
         !r.blocks[end - 1].moved) {
    --end;
  }
  if (end == r.blocks.size() || end == 0 ||
      r.blocks[end - 1].outcome != "isolated") {
    return;
  }
  r.tail_blocks = static_cast<int>(r.blocks.size() - end);
  r.not_stored -= r.tail_blocks;
  r.blocks.resize(end);
  plant->resize(end);
  fate->copy.resize(end);
  fate->before_probe.resize(end);
}

}  // namespace

PairResult DecidePair(const PairObservation& o) {
  PairResult r;
  SetWindow(o, r);
  std::vector<const BlockEntry*> plant;
  PlantFate fate;
  std::string why = CannotJudge(o, &plant, &fate);
  CountMoves(plant, fate, r);
  if (!why.empty()) {
    return NoteTierHashes(Inconclusive(std::move(r), std::move(why)));
  }
  CheckBlocks(plant, fate, o.after, r);
  r.witness_stored = WitnessStored(plant, o.probe);
  DropPromptTail(&plant, &fate, r);
  r = NoteTierHashes(Judge(std::move(r), plant, o));
  if (r.tail_blocks > 0) {
    absl::StrAppend(&r.reason, " (A's last ", r.tail_blocks,
                    " blocks held tokens after P that B's prompt does not, "
                    "as a chat template's closing markers: not judged)");
  }
  return r;
}

json PairResult::ToJson() const {
  json blocks_json = json::array();
  for (size_t i = 0; i < blocks.size() && i < kBlocksShown; ++i) {
    const BlockCheck& c = blocks[i];
    blocks_json.push_back(
        {{"outcome", c.outcome},
         {"a_hash", c.a_hash.Hex()},
         {"a_seq", c.a_seq},
         {"b_hash", c.b_hash.has_value() ? json(c.b_hash->Hex()) : json()},
         {"b_seq", c.b_seq >= 0 ? json(c.b_seq) : json()},
         {"moved", c.moved},
         {"tier_hash",
          c.tier_hash.has_value() ? json(c.tier_hash->Hex()) : json()}});
  }
  return {{"pair", index},
          {"verdict", PairVerdictName(verdict)},
          {"reason", reason},
          {"blocks", blocks.size()},
          {"isolated", isolated},
          {"not_stored", not_stored},
          {"same_hash", same_hash},
          {"tail_blocks", tail_blocks},
          {"hit_signal", hit_signal},
          {"witness_stored", witness_stored},
          {"evicted", evicted},
          {"moved", moved},
          {"promoted", promoted},
          {"tier_medium", tier_medium},
          {"tier_rehashed", tier_rehashed},
          {"epoch", epoch},
          {"first_seq", first_seq},
          {"last_seq", last_seq},
          {"probe", probe_id},
          {"probe_cached_tokens",
           probe_cached_tokens >= 0 ? json(probe_cached_tokens) : json()},
          {"control_cached_tokens",
           control_cached_tokens >= 0 ? json(control_cached_tokens) : json()},
          {"probe_ttft_ms", probe_ttft_ms},
          {"control_ttft_ms", control_ttft_ms},
          {"block_checks", blocks_json}};
}

}  // namespace kvcanary::auditor::kv_events
