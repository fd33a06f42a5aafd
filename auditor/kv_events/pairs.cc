#include "auditor/kv_events/pairs.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/random.h"
#include "common/status_macros.h"

namespace kvcanary::auditor::kv_events {
namespace {

using json = nlohmann::json;

// B's first token this much faster than its control's: a hit, by timing.
constexpr double kHitTimingRatio = 0.5;
// Letters' worth of prompt that the witness's nonce ("Ticket NNNNNNNNNN.")
// takes at most on common tokenizers.
constexpr int kWitnessNonceUnits = 12;
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

void SetWindow(const PairObservation& o, PairResult& r) {
  r.epoch = o.after.to.epoch;
  r.first_seq = o.plant.from.seq + 1;
  r.last_seq = o.after.to.seq;
  r.probe_cached_tokens = o.probe_cached_tokens;
  r.control_cached_tokens = o.control_cached_tokens;
  r.probe_ttft_ms = o.probe_ttft_ms;
  r.control_ttft_ms = o.control_ttft_ms;
  r.hit_signal = o.probe_cached_tokens > 0 ||
                 (o.probe_ttft_ms > 0 && o.control_ttft_ms > 0 &&
                  o.probe_ttft_ms < kHitTimingRatio * o.control_ttft_ms);
}

// Checks A's blocks against what came after B's request.
void CheckBlocks(const std::vector<const BlockEntry*>& plant, const Span& after,
                 PairResult& r) {
  absl::flat_hash_map<uint64_t, std::vector<const BlockEntry*>> stores;
  for (const BlockEntry& e : after.entries) {
    if (e.type == EventType::kBlockStored && e.token_digest != 0) {
      stores[e.token_digest].push_back(&e);
    }
  }
  for (const BlockEntry* a : plant) {
    BlockCheck c;
    c.a_hash = a->hash;
    c.a_seq = a->seq;
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

// Why the pair cannot be judged ("" when it can); A's blocks in `plant`.
std::string CannotJudge(const PairObservation& o,
                        std::vector<const BlockEntry*>* plant) {
  if (!o.plant_ok || !o.probe_ok || !o.control_ok) {
    return "a request of the pair was not answered with a completion";
  }
  for (const Span* s : {&o.plant, &o.after}) {
    if (std::string why = NotWhole(*s); !why.empty()) return why;
  }
  bool stored_without_tokens = false;
  for (const BlockEntry& e : o.plant.entries) {
    if (e.type != EventType::kBlockStored) continue;
    if (e.token_digest == 0) {
      stored_without_tokens = true;
    } else {
      plant->push_back(&e);
    }
  }
  if (plant->empty()) {
    return stored_without_tokens
               ? "the plant's stored blocks carry no token ids (or not "
                 "block_size of them each): B's cannot be matched to them"
               : "no block was stored for A's plant (prefix caching off, a "
                 "prompt shorter than a block, or a silent stream)";
  }
  absl::flat_hash_set<BlockHash> a_hashes;
  for (const BlockEntry* a : *plant) a_hashes.insert(a->hash);
  for (const BlockEntry& e : o.after.entries) {
    if (e.type == EventType::kAllBlocksCleared ||
        (e.type == EventType::kBlockRemoved && a_hashes.contains(e.hash))) {
      return "A's blocks were evicted or cleared before B's request could be "
             "judged against them";
    }
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

}  // namespace

PairResult DecidePair(const PairObservation& o) {
  PairResult r;
  SetWindow(o, r);
  std::vector<const BlockEntry*> plant;
  if (std::string why = CannotJudge(o, &plant); !why.empty()) {
    return Inconclusive(std::move(r), std::move(why));
  }
  CheckBlocks(plant, o.after, r);
  r.witness_stored = WitnessStored(plant, o.probe);
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

json PairResult::ToJson() const {
  json blocks_json = json::array();
  for (size_t i = 0; i < blocks.size() && i < kBlocksShown; ++i) {
    const BlockCheck& c = blocks[i];
    blocks_json.push_back(
        {{"outcome", c.outcome},
         {"a_hash", c.a_hash.Hex()},
         {"a_seq", c.a_seq},
         {"b_hash", c.b_hash.has_value() ? json(c.b_hash->Hex()) : json()},
         {"b_seq", c.b_seq >= 0 ? json(c.b_seq) : json()}});
  }
  return {{"pair", index},
          {"verdict", PairVerdictName(verdict)},
          {"reason", reason},
          {"blocks", blocks.size()},
          {"isolated", isolated},
          {"not_stored", not_stored},
          {"same_hash", same_hash},
          {"hit_signal", hit_signal},
          {"witness_stored", witness_stored},
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

int KvEventsOutcome::Count(PairVerdict v) const {
  return static_cast<int>(
      std::count_if(pairs.begin(), pairs.end(),
                    [v](const PairResult& p) { return p.verdict == v; }));
}

int KvEventsOutcome::block_pairs_checked() const {
  int n = 0;
  for (const PairResult& p : pairs) {
    if (p.verdict != PairVerdict::kInconclusive) {
      n += static_cast<int>(p.blocks.size());
    }
  }
  return n;
}

json KvEventsOutcome::ToJson() const {
  json p = json::array();
  for (const PairResult& r : pairs) p.push_back(r.ToJson());
  return {{"endpoint", endpoint},
          {"writer", writer},
          {"reader", reader},
          {"requested_pairs", requested_pairs},
          {"shared_pairs", shared()},
          {"isolated_pairs", isolated()},
          {"block_pairs_checked", block_pairs_checked()},
          {"pairs", p},
          {"stream", stream.ToJson()},
          {"notes", notes}};
}

namespace {

struct Sent {
  bool ok = false;
  int status = 0;
  int cached_tokens = -1;
  double ttft_ms = 0;
};

Sent SendOne(Target& session, const AuditTenant& t, const std::string& prompt,
             bool report_full) {
  // vLLM's per-request switch to report every block, hits included.
  const json extra =
      report_full ? json{{"kv_cache_report_mode", "full"}} : json(nullptr);
  const Completion c = session.SendAlone(t, prompt, 1, /*stream=*/true, extra);
  return {c.usable, c.status, c.cached_tokens, c.ttft_ms};
}

absl::Status KeyCheck(const Sent& s, const AuditTenant& t) {
  if (s.status != 401 && s.status != 403) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("the target refused tenant '", t.name, "' key (HTTP ",
                   s.status, ") during the kv_events probes"));
}

// A pair's spans between the marks taken before A's request, B's, the
// control's and after it, with what the three requests returned.
PairObservation Observed(const Ledger& ledger, const std::array<Mark, 4>& m,
                         const Sent& plant, const Sent& probe,
                         const Sent& control) {
  PairObservation o;
  o.plant = ledger.Between(m[0], m[1]);
  o.probe = ledger.Between(m[1], m[2]);
  o.after = ledger.Between(m[1], m[3]);
  o.control = ledger.Between(m[2], m[3]);
  o.plant_ok = plant.ok;
  o.probe_ok = probe.ok;
  o.control_ok = control.ok;
  o.probe_cached_tokens = probe.cached_tokens;
  o.control_cached_tokens = control.cached_tokens;
  o.probe_ttft_ms = probe.ttft_ms;
  o.control_ttft_ms = control.ttft_ms;
  return o;
}

}  // namespace

absl::StatusOr<KvEventsOutcome> RunKvEventsProbes(
    Target& session, const AuditTenant& writer, const AuditTenant& reader,
    Subscriber& subscriber, Ledger& ledger, const KvEventsProbeOptions& options,
    const std::function<std::string(int units)>& fresh_prefix,
    EvidenceLog* log) {
  KvEventsOutcome out;
  out.writer = writer.name;
  out.reader = reader.name;
  out.endpoint = subscriber.options().endpoint;
  out.requested_pairs = options.pairs;
  // Each window closes once the stream is quiet and caught up with what
  // the publisher sent (a message dropped at its end is replayed into it).
  auto settle = [&] {
    subscriber.WaitQuiet(options.settle_quiet, options.settle_max);
    subscriber.Sync();
  };
  // One request, then its window closed: an error once the target is down
  // or refuses the tenant's key.
  auto send = [&](const AuditTenant& t,
                  const std::string& prompt) -> absl::StatusOr<Sent> {
    const Sent s = SendOne(session, t, prompt, options.report_full);
    RETURN_IF_ERROR(session.down());
    RETURN_IF_ERROR(KeyCheck(s, t));
    settle();
    return s;
  };
  // P is about half the letters; the witness has the rest, less room for
  // its own cache-busting nonce.
  const int p_units = std::max(4, options.prefix_units / 2);
  const int w_units =
      std::max(4, options.prefix_units - p_units - kWitnessNonceUnits);
  for (int i = 0; i < options.pairs; ++i) {
    // B's probe is P and a witness suffix, within the letters a prompt may
    // hold; its control has the same shape, so that their first-token
    // times compare. (Joined by a space: P's last token stays A's.)
    const std::string prefix = fresh_prefix(p_units);
    const std::string probe = absl::StrCat(prefix, " ", fresh_prefix(w_units));
    const std::string control =
        absl::StrCat(fresh_prefix(p_units), " ", fresh_prefix(w_units));
    settle();
    const Mark m0 = ledger.Now();
    ASSIGN_OR_RETURN(const Sent a, send(writer, prefix));
    const Mark m1 = ledger.Now();
    ASSIGN_OR_RETURN(const Sent b, send(reader, probe));
    const Mark m2 = ledger.Now();
    ASSIGN_OR_RETURN(const Sent c, send(reader, control));
    const Mark m3 = ledger.Now();
    PairResult r = DecidePair(Observed(ledger, {m0, m1, m2, m3}, a, b, c));
    r.index = i;
    if (log != nullptr) {
      json row = r.ToJson();
      row["writer"] = writer.name;
      row["reader"] = reader.name;
      row["endpoint"] = out.endpoint;
      RETURN_IF_ERROR(log->Record("kv_events_pair", std::move(row), true));
    }
    out.pairs.push_back(std::move(r));
  }
  out.stream = ledger.stats();
  if (options.report_full) {
    out.notes.push_back(
        "the probes asked for every block to be reported, hits included "
        "(kv_cache_report_mode \"full\")");
  }
  if (out.stream.gaps > out.stream.gaps_recovered) {
    out.notes.push_back(absl::StrCat(
        out.stream.missing_messages,
        " event messages were lost for good (sequence gaps the replay socket "
        "did not fill)"));
  }
  if (log != nullptr) {
    RETURN_IF_ERROR(log->Record(
        "kv_events_stream",
        {{"endpoint", out.endpoint}, {"stats", out.stream.ToJson()}}, true));
  }
  return out;
}

DetectorCoverage KvEventsCoverage(const KvEventsOutcome& o) {
  DetectorCoverage d;
  d.name = "kv_events";
  d.required = true;
  d.unit = "probe pairs judged from the engine's KV events";
  d.floor = std::max(1, o.requested_pairs);
  const int judged = o.shared() + o.isolated();
  d.coverage[o.writer] = judged;
  d.coverage[o.reader] = judged;
  d.findings = o.shared();
  for (const PairResult& p : o.pairs) {
    if (p.verdict == PairVerdict::kInconclusive ||
        p.verdict == PairVerdict::kSameHash) {
      d.AddFailure(absl::StrCat("pair ", p.index, ": ", p.reason));
    }
  }
  for (const std::string& n : o.notes) d.notes.push_back(n);
  d.stats = {{"block_pairs_checked", o.block_pairs_checked()},
             {"shared_pairs", o.shared()},
             {"isolated_pairs", o.isolated()},
             {"endpoint", o.endpoint},
             {"stream", o.stream.ToJson()}};
  d.Judge({o.writer, o.reader});
  return d;
}

KvEventStreamCounts StreamCounts(const LedgerStats& s) {
  return {s.messages, s.replayed_messages, s.missing_messages, s.undecodable,
          s.restarts};
}

std::vector<Finding> KvEventsFindings(const KvEventsOutcome& o) {
  std::vector<Finding> out;
  for (const PairResult& p : o.pairs) {
    if (p.verdict != PairVerdict::kShared) continue;
    Finding f;
    f.kind = "cross_tenant_kv_block_hit";
    f.severity = Severity::kHigh;
    f.detector = "kv_events";
    f.writer = o.writer;
    f.reader = o.reader;
    f.probe = p.probe_id;
    f.detail = p.ToJson();
    f.detail["endpoint"] = o.endpoint;
    out.push_back(std::move(f));
  }
  return out;
}

KvEventsCheck::KvEventsCheck(SubscriberOptions options)
    : options_(std::move(options)),
      subscriber_(options_, &ledger_),
      rng_(RandomU64()) {}

absl::Status KvEventsCheck::Start() { return subscriber_.Start(); }

std::string KvEventsCheck::FreshPrefix(int units) {
  // Unique randomness first, so no other prompt shares a block with it;
  // then random single letters, a token or two each on any tokenizer.
  static constexpr char kLetters[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  std::string p = buster_.Next();
  for (int i = 0; i < units; ++i) {
    p.push_back(' ');
    p.push_back(kLetters[rng_() % 52]);
  }
  return p;
}

absl::StatusOr<KvEventsOutcome> KvEventsCheck::Run(Target& session,
                                                   const AuditTenant& writer,
                                                   const AuditTenant& reader,
                                                   int prefix_units,
                                                   EvidenceLog* log) {
  KvEventsProbeOptions po;
  po.pairs = options_.pairs;
  po.prefix_units = std::max(8, prefix_units);
  po.report_full = options_.report_full;
  absl::StatusOr<KvEventsOutcome> out = RunKvEventsProbes(
      session, writer, reader, subscriber_, ledger_, po,
      [this](int units) { return FreshPrefix(units); }, log);
  subscriber_.Stop();
  return out;
}

}  // namespace kvcanary::auditor::kv_events
