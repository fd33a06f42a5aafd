#include "auditor/kv_events_probe.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

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

void SetWindow(const PairObservation& o, PairResult& r) {
  r.epoch = o.after.to.epoch;
  r.first_seq = o.plant.from.seq + 1;
  r.last_seq = o.after.to.seq;
  r.probe_cached_tokens = o.probe_cached_tokens;
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
  for (const BlockEntry& e : o.control.entries) {
    if (e.type == EventType::kBlockStored) return "";
  }
  return "B's control prefix stored no block: silence after B's request "
         "cannot be told from a hit";
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
  if (r.not_stored > 0 && r.isolated == 0) {
    if (o.probe_cached_tokens == 0) {
      return Inconclusive(std::move(r),
                          "B stored none of A's blocks, but the target "
                          "reported 0 cached tokens for B's request");
    }
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
          {"epoch", epoch},
          {"first_seq", first_seq},
          {"last_seq", last_seq},
          {"probe", probe_id},
          {"probe_cached_tokens",
           probe_cached_tokens >= 0 ? json(probe_cached_tokens) : json()},
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

Sent SendOne(TargetSession& session, const AuditTenant& t,
             const std::string& prompt, bool report_full) {
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

}  // namespace

absl::StatusOr<KvEventsOutcome> RunKvEventsProbes(
    TargetSession& session, const AuditTenant& writer,
    const AuditTenant& reader, Subscriber& subscriber, Ledger& ledger,
    const KvEventsProbeOptions& options,
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
  for (int i = 0; i < options.pairs; ++i) {
    const std::string prefix = fresh_prefix(options.prefix_units);
    const std::string control = fresh_prefix(options.prefix_units);
    settle();
    const Mark m0 = ledger.Now();
    ASSIGN_OR_RETURN(const Sent a, send(writer, prefix));
    const Mark m1 = ledger.Now();
    ASSIGN_OR_RETURN(const Sent b, send(reader, prefix));
    const Mark m2 = ledger.Now();
    ASSIGN_OR_RETURN(const Sent c, send(reader, control));
    const Mark m3 = ledger.Now();
    PairObservation o;
    o.plant = ledger.Between(m0, m1);
    o.after = ledger.Between(m1, m3);
    o.control = ledger.Between(m2, m3);
    o.plant_ok = a.ok;
    o.probe_ok = b.ok;
    o.control_ok = c.ok;
    o.probe_cached_tokens = b.cached_tokens;
    o.probe_ttft_ms = b.ttft_ms;
    o.control_ttft_ms = c.ttft_ms;
    PairResult r = DecidePair(o);
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
      rng_(std::random_device{}()) {}

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

absl::StatusOr<KvEventsOutcome> KvEventsCheck::Run(TargetSession& session,
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
