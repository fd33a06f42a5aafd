#include "auditor/kv_events/pairs.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "common/status_macros.h"

namespace kvcanary::auditor::kv_events {
namespace {

using json = nlohmann::json;

// Letters' worth of prompt that the witness's nonce ("NNNNNNNNNN Ticket.")
// takes at most on common tokenizers.
constexpr int kWitnessNonceUnits = 12;

}  // namespace

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
// control's and after it, with what the three requests returned; `evict`:
// where the eviction step began (null: none ran), `evict_done` whether it
// completed.
PairObservation Observed(const Ledger& ledger, const std::array<Mark, 4>& m,
                         const Mark* evict, bool evict_done, const Sent& plant,
                         const Sent& probe, const Sent& control) {
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
  if (evict != nullptr) {
    o.evicted = true;
    o.evict_done = evict_done;
    o.evict_from = *evict;
  }
  return o;
}

// Runs one pair at a time: each request (and the eviction step) alone, its
// window closed once the stream is quiet and caught up with what the
// publisher sent (a message dropped at its end is replayed into it).
class PairRunner {
 public:
  PairRunner(Target& session, Subscriber& subscriber, const Ledger& ledger,
             const KvEventsProbeOptions& options, const EvictStep& evict)
      : session_(session),
        subscriber_(subscriber),
        ledger_(ledger),
        options_(options),
        evict_(evict) {}

  // A's `prefix`, the eviction step, B's `probe`, B's `control`.
  absl::StatusOr<PairResult> Run(const AuditTenant& writer,
                                 const AuditTenant& reader,
                                 const std::string& prefix,
                                 const std::string& probe,
                                 const std::string& control) {
    Settle();
    const Mark m0 = ledger_.Now();
    ASSIGN_OR_RETURN(const Sent a, Send(writer, prefix));
    const Mark evict_from = ledger_.Now();
    bool evict_done = true;
    if (evict_) {
      ASSIGN_OR_RETURN(evict_done, evict_());
      RETURN_IF_ERROR(session_.down());
      Settle();
    }
    const Mark m1 = ledger_.Now();
    ASSIGN_OR_RETURN(const Sent b, Send(reader, probe));
    const Mark m2 = ledger_.Now();
    ASSIGN_OR_RETURN(const Sent c, Send(reader, control));
    const Mark m3 = ledger_.Now();
    return DecidePair(Observed(ledger_, {m0, m1, m2, m3},
                               evict_ ? &evict_from : nullptr, evict_done, a, b,
                               c));
  }

 private:
  void Settle() {
    subscriber_.WaitQuiet(options_.settle_quiet, options_.settle_max);
    subscriber_.Sync();
  }
  // One request, then its window closed: an error once the target is down
  // or refuses the tenant's key.
  absl::StatusOr<Sent> Send(const AuditTenant& t, const std::string& prompt) {
    const Sent s = SendOne(session_, t, prompt, options_.report_full);
    RETURN_IF_ERROR(session_.down());
    RETURN_IF_ERROR(KeyCheck(s, t));
    Settle();
    return s;
  }

  Target& session_;
  Subscriber& subscriber_;
  const Ledger& ledger_;
  const KvEventsProbeOptions& options_;
  const EvictStep& evict_;
};

// The outcome's notes on how the probes ran and what the stream lost.
void AddNotes(const KvEventsProbeOptions& options, bool evicted,
              KvEventsOutcome& out) {
  if (options.report_full) {
    out.notes.push_back(
        "the probes asked for every block to be reported, hits included "
        "(kv_cache_report_mode \"full\")");
  }
  if (evicted) {
    out.notes.push_back(
        "each pair ran an eviction step between A's plant and B's probe, to "
        "push the plant out of the first tier (a second tier's events "
        "judged by medium)");
  }
  if (out.stream.gaps > out.stream.gaps_recovered) {
    out.notes.push_back(absl::StrCat(
        out.stream.missing_messages,
        " event messages were lost for good (sequence gaps the replay socket "
        "did not fill)"));
  }
}

}  // namespace

absl::StatusOr<KvEventsOutcome> RunKvEventsProbes(
    Target& session, const AuditTenant& writer, const AuditTenant& reader,
    Subscriber& subscriber, Ledger& ledger, const KvEventsProbeOptions& options,
    const std::function<std::string(int units)>& fresh_prefix, EvidenceLog* log,
    const EvictStep& evict) {
  KvEventsOutcome out;
  out.writer = writer.name;
  out.reader = reader.name;
  out.endpoint = subscriber.options().endpoint;
  out.requested_pairs = options.pairs;
  PairRunner runner(session, subscriber, ledger, options, evict);
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
    ASSIGN_OR_RETURN(PairResult r,
                     runner.Run(writer, reader, prefix, probe, control));
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
  AddNotes(options, static_cast<bool>(evict), out);
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

absl::StatusOr<KvEventsOutcome> KvEventsCheck::Run(
    Target& session, const AuditTenant& writer, const AuditTenant& reader,
    int prefix_units, EvidenceLog* log, const EvictStep& evict) {
  KvEventsProbeOptions po;
  po.pairs = options_.pairs;
  po.prefix_units = std::max(8, prefix_units);
  po.report_full = options_.report_full;
  absl::StatusOr<KvEventsOutcome> out = RunKvEventsProbes(
      session, writer, reader, subscriber_, ledger_, po,
      [this](int units) { return FreshPrefix(units); }, log, evict);
  subscriber_.Stop();
  return out;
}

}  // namespace kvcanary::auditor::kv_events
