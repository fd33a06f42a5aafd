#include "auditor/audits/cache_audit/cache_audit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "auditor/audits/cache_audit/decision.h"
#include "auditor/audits/cache_audit/report.h"
#include "auditor/campaign/calibrate.h"
#include "auditor/campaign/command_result.h"
#include "auditor/evidence/log.h"
#include "common/clock.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;

// A prefix of most of the limit: a hit then saves most of the prefill.
constexpr double kPrefixShareOfLimit = 0.75;
// Unless that is huge: past a few thousand tokens a hit is plain enough
// and each miss only costs time (Gu et al. used 5000).
constexpr int kMaxAutoPrefixTokens = 4096;
constexpr int kUnknownLimitPrefixTokens = 1024;
// Room left under the limit for the suffix and the token generated.
constexpr int kSuffixMarginTokens = 16;
constexpr int kMaxSizingUnits = 64;

const char* const kRequestKinds[] = {"cache_sizing", "cache_control",
                                     "cache_prime",  "cache_same",
                                     "cache_cross",  "cache_evict"};
enum class RequestKind { kSizing, kControl, kPrime, kSame, kCross, kEvict };

bool KeyRefused(int status) { return status == 401 || status == 403; }

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
  CampaignResult r_;
};

void CacheAudit::Progress(const std::string& line) const {
  if (o_.progress) {
    std::fprintf(stderr, "[kvcanary-auditor] cache-audit: %s\n", line.c_str());
  }
}

absl::Status CacheAudit::AddFinding(Finding f) {
  f.ts_us = NowUs();
  metrics_->CountFinding(f.kind, SeverityName(f.severity));
  json body = f.ToJson();
  r_.findings.push_back(std::move(f));
  return Record("finding", std::move(body), /*flush=*/true);
}

absl::Status CacheAudit::KeyCheck(const Completion& c, int who) const {
  if (!KeyRefused(c.status)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "target ", session_.root(), " refused tenant '", tenant(who).name,
      "' key (HTTP ", c.status,
      ") during the audit: check the tenants file (a key revoked mid-run "
      "makes every later sample meaningless)"));
}

std::string CacheAudit::Prefix(int units) {
  return CacheProbePrefix(&buster_, units, [this] { return rng_(); });
}

std::string CacheAudit::Suffix() {
  return absl::StrFormat(" Reply %04u.", static_cast<unsigned>(rng_() % 10000));
}

int CacheAudit::PrefixTokens() const {
  if (!prime_tokens_.empty()) {
    std::vector<int> v = prime_tokens_;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  }
  const CacheSizing& z = out_.sizing;
  return static_cast<int>(z.base_tokens + z.units * z.unit_tokens);
}

Completion CacheAudit::Send(RequestKind kind, int who,
                            const std::string& prompt, int round,
                            int64_t* probe_id) {
  const int64_t id = next_probe_++;
  if (probe_id != nullptr) *probe_id = id;
  ++out_.requests;
  const Completion c = session_.SendAlone(tenant(who), prompt, 1, true);
  const std::string outcome = Outcome(c);
  const std::string name =
      pair_ == nullptr ? kRequestKinds[static_cast<int>(kind)]
                       : absl::StrCat(pair_->check, "_",
                                      kRequestKinds[static_cast<int>(kind)] +
                                          6);  // salt_forged_cross, ...
  metrics_->CountProbe(name, outcome);
  probe_times_.push_back(NowUs());
  if (!c.usable) error_times_.push_back(probe_times_.back());
  json row = {{"probe", id},
              {"kind", name},
              {"round", round},
              {"tenant", tenant(who).name},
              {"outcome", outcome},
              {"http_status", c.status},
              {"error_in_200", c.http_ok_error},
              {"ms", c.total_ms},
              {"prompt_sha256", Sha256Hex(prompt)},
              {"engine_request", c.engine_request}};
  if (pair_ != nullptr) {
    row["check"] = pair_->check;
    row["as"] = who == 0 ? pair_->writer_label : pair_->reader_label;
    row["cache_salt_sha256"] = Sha256Hex(tenant(who).body_salt);
  }
  if (c.usable) {
    row["ttft_ms"] = c.ttft_ms;
    row["prompt_tokens"] = c.prompt_tokens;
    row["cached_tokens"] =
        c.cached_tokens >= 0 ? json(c.cached_tokens) : json(nullptr);
    row["cached_tokens_from"] = CachedTokensFromName(c.cached_from);
  }
  (void)Record("probe", std::move(row));  // a failed append is retried
  return c;
}

absl::Status CacheAudit::Size() {
  const TargetLimit& limit = session_.advertised();
  const int room = limit.prompt_tokens - kSuffixMarginTokens;
  CacheSizing& z = out_.sizing;
  z.target_tokens = o_.prefix_tokens;
  if (z.target_tokens == 0) {
    z.target_tokens = limit.prompt_tokens > 0
                          ? std::min(kMaxAutoPrefixTokens,
                                     static_cast<int>(limit.prompt_tokens *
                                                      kPrefixShareOfLimit))
                          : kUnknownLimitPrefixTokens;
  } else if (limit.prompt_tokens > 0 && z.target_tokens > room) {
    out_.notes.push_back(
        absl::StrCat("--prefix-tokens=", z.target_tokens, " lowered to ", room,
                     ": the advertised limit is ", limit.prompt_tokens));
    z.target_tokens = room;
  }
  if (limit.prompt_tokens <= 0) {
    out_.notes.push_back(absl::StrCat(
        "no input limit advertised: the prefix is ", z.target_tokens,
        " tokens (state another with --prefix-tokens)"));
  }
  // Tokens per letter from two cache-busted prompts (also the warm-up).
  const int units = std::clamp(z.target_tokens / 4, 4, kMaxSizingUnits);
  const Completion one =
      Send(RequestKind::kSizing, 0, Prefix(units), -1, nullptr);
  RETURN_IF_ERROR(session_.down());
  const Completion two =
      Send(RequestKind::kSizing, 0, Prefix(2 * units), -1, nullptr);
  RETURN_IF_ERROR(session_.down());
  // B too: its key and a prompt of this shape, before any sample counts.
  const Completion reader =
      Send(RequestKind::kSizing, 1, Prefix(units), -1, nullptr);
  RETURN_IF_ERROR(session_.down());
  for (const auto& [c, who] :
       {std::pair(&one, 0), std::pair(&two, 0), std::pair(&reader, 1)}) {
    RETURN_IF_ERROR(KeyCheck(*c, who));
    if (!c->usable) {
      return absl::FailedPreconditionError(absl::StrCat(
          "a short cache-busted prompt of tenant '", tenant(who).name,
          "' failed (HTTP ", c->status, "): ", c->error.message()));
    }
  }
  z.counts_reported =
      one.prompt_tokens > 0 && two.prompt_tokens > one.prompt_tokens;
  if (z.counts_reported) {
    z.unit_tokens =
        static_cast<double>(two.prompt_tokens - one.prompt_tokens) / units;
    z.base_tokens = one.prompt_tokens - units * z.unit_tokens;
  } else {
    z.unit_tokens = 1;
    z.base_tokens = 8;
    out_.notes.push_back(
        "usage.prompt_tokens not reported: the prefix is sized at an "
        "estimated token per letter");
  }
  z.units = std::max(
      1, static_cast<int>((z.target_tokens - z.base_tokens) / z.unit_tokens));
  return Record("cache_sizing",
                {{"target_tokens", z.target_tokens},
                 {"units", z.units},
                 {"unit_tokens", z.unit_tokens},
                 {"base_tokens", z.base_tokens},
                 {"counts_reported", z.counts_reported},
                 {"limit", limit.prompt_tokens},
                 {"limit_source", limit.source}},
                true);
}

absl::Status CacheAudit::Sample(CacheArm arm, int round) {
  ArmSamples& s = out_.arms[ArmIndex(arm)];
  // A's prime: the prefix probed (same, cross), or an unrelated one of the
  // same length (controls), so every probe follows the same request.
  const std::string prime = Prefix(out_.sizing.units);
  const bool primed = arm == CacheArm::kSame || arm == CacheArm::kCross;
  const Completion p = Send(RequestKind::kPrime, 0, prime, round, nullptr);
  RETURN_IF_ERROR(session_.down());
  RETURN_IF_ERROR(KeyCheck(p, 0));
  if (IsRefusal(p.status)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the primed prefix (about ", PrefixTokens(),
                     " tokens) was refused (HTTP ", p.status,
                     "): state a smaller --prefix-tokens"));
  }
  ++s.attempts;
  if (!p.usable) {
    ++s.failures[p.status];
    return absl::OkStatus();
  }
  if (p.prompt_tokens > 0) prime_tokens_.push_back(p.prompt_tokens);
  std::optional<int> evict_failed;
  RETURN_IF_ERROR(Evict(round, &evict_failed));
  if (evict_failed.has_value()) {
    ++s.failures[*evict_failed];
    return absl::OkStatus();
  }
  const int prober =
      arm == CacheArm::kWriterControl || arm == CacheArm::kSame ? 0 : 1;
  const RequestKind kind = arm == CacheArm::kSame    ? RequestKind::kSame
                           : arm == CacheArm::kCross ? RequestKind::kCross
                                                     : RequestKind::kControl;
  const std::string prefix = primed ? prime : Prefix(out_.sizing.units);
  int64_t id = 0;
  const Completion c = Send(kind, prober, prefix + Suffix(), round, &id);
  RETURN_IF_ERROR(session_.down());
  RETURN_IF_ERROR(KeyCheck(c, prober));
  ++s.probes;
  if (!c.usable) {
    ++s.failures[c.status];
    ++s.probes_failed;
    if (arm == CacheArm::kCross) cross_failed_ids_.push_back(id);
    return absl::OkStatus();
  }
  s.ttft_ms.push_back(c.ttft_ms);
  s.cached_tokens.push_back(c.cached_tokens);
  if (c.cached_from != CachedTokensFrom::kNone) {
    out_.cached_from = CachedTokensFromName(c.cached_from);
  }
  if (arm == CacheArm::kCross) cross_probe_ids_.push_back(id);
  return absl::OkStatus();
}

absl::Status CacheAudit::Evict(int round, std::optional<int>* failed) {
  if (o_.evict_tokens <= 0) return absl::OkStatus();
  // Fillers as long as the prime: each is cached like it, so together
  // they push it out of a least-recently-used first tier.
  const int per = std::max(1, PrefixTokens());
  const int n = (o_.evict_tokens + per - 1) / per;
  for (int i = 0; i < n; ++i) {
    const Completion c =
        Send(RequestKind::kEvict, 0, Prefix(out_.sizing.units), round, nullptr);
    RETURN_IF_ERROR(session_.down());
    RETURN_IF_ERROR(KeyCheck(c, 0));
    if (!c.usable) {
      *failed = c.status;
      return absl::OkStatus();
    }
  }
  out_.evict_requests += n;
  out_.evicted_tokens += static_cast<int64_t>(n) * per;
  return absl::OkStatus();
}

absl::Status CacheAudit::Round(int round) {
  // Interleaved in a fresh order each round: drift and load hit every arm
  // alike.
  std::array<CacheArm, kCacheArms> order = {CacheArm::kWriterControl,
                                            CacheArm::kReaderControl,
                                            CacheArm::kSame, CacheArm::kCross};
  std::shuffle(order.begin(), order.end(), rng_);
  for (CacheArm arm : order) RETURN_IF_ERROR(Sample(arm, round));
  return absl::OkStatus();
}

bool CacheAudit::TooManyFailures() const {
  for (const ArmSamples& s : out_.arms) {
    if (s.attempts > 0 && 2 * s.failed() > s.attempts) return true;
  }
  return false;
}

absl::Status CacheAudit::Look(size_t look, bool last) {
  ++out_.looks_taken;
  const double alpha = out_.plan.alpha_per_look;
  out_.prefix_tokens = PrefixTokens();
  out_.tests = RunLookTests(out_.arms, alpha);
  out_.cached = ReadCachedTokens(out_.arms, out_.prefix_tokens);
  out_.level = DecideLevel(out_.tests, out_.cached, alpha, last);
  const LookTests& t = out_.tests;
  Progress(absl::StrFormat(
      "look %d/%d, %d per arm: p(same<control)=%s p(cross<control)=%s "
      "p(same<cross)=%s p(cross refused more)=%s%s",
      look + 1, out_.plan.looks.size(), t.n,
      KsPValueText(t.same_vs_control.p_value),
      KsPValueText(t.cross_vs_control.p_value),
      KsPValueText(t.same_vs_cross.p_value), KsPValueText(t.refusal.p_value),
      out_.level.has_value() ? absl::StrCat(": ", SharingLevelName(*out_.level))
                             : ""));
  json row = t.ToJson();
  row["look"] = look + 1;
  if (pair_ != nullptr) row["check"] = pair_->check;
  row["rounds"] = out_.rounds;
  row["cached_tokens"] = out_.cached.ToJson();
  row["level"] = out_.level.has_value() ? json(SharingLevelName(*out_.level))
                                        : json(nullptr);
  return Record("cache_look", std::move(row), true);
}

absl::Status CacheAudit::KvEvents() {
  if (o_.kv_events.endpoint.empty()) return absl::OkStatus();
  kv_events::KvEventsCheck check(o_.kv_events);
  RETURN_IF_ERROR(check.Start());
  Progress(absl::StrFormat("kv_events: %d probe pairs against %s",
                           o_.kv_events.pairs, o_.kv_events.endpoint));
  // A prefix of most of the sized one: several blocks on any engine.
  // --evict-tokens: A's plant leaves the first tier before B's probe, as
  // the timing arms' primes do.
  kv_events::EvictStep evict;
  if (o_.evict_tokens > 0) {
    evict = [this]() -> absl::StatusOr<bool> {
      std::optional<int> failed;
      RETURN_IF_ERROR(Evict(-1, &failed));
      return !failed.has_value();
    };
  }
  ASSIGN_OR_RETURN(kv_out_, check.Run(session_, tenant(0), tenant(1),
                                      out_.sizing.units, log_.get(), evict));
  metrics_->CountKvEvents(kv_events::StreamCounts(kv_out_->stream));
  for (Finding& f : kv_events::KvEventsFindings(*kv_out_)) {
    RETURN_IF_ERROR(AddFinding(std::move(f)));
  }
  Progress(absl::StrFormat(
      "kv_events: %d shared, %d isolated of %d pairs (%d block pairs "
      "checked)",
      kv_out_->shared(), kv_out_->isolated(), o_.kv_events.pairs,
      kv_out_->block_pairs_checked()));
  return absl::OkStatus();
}

absl::Status CacheAudit::Start() {
  const std::vector<AuditTenant>& all = session_.options().tenants;
  if (all.size() < 2) {
    return absl::InvalidArgumentError(
        "cache-audit needs two tenants: A primes a prefix, B probes it");
  }
  party_[0] = all[0];
  party_[1] = all[1];
  if (o_.salts) {
    ASSIGN_OR_RETURN(salt_pairs_, MakeSaltPairs(all, o_.salt, &out_.notes));
    party_[0] = salt_pairs_.front().writer;
    party_[1] = salt_pairs_.front().reader;
  }
  out_.writer = tenant(0).name;
  out_.reader = tenant(1).name;
  out_.max_samples = o_.max_samples;
  out_.evict_tokens = o_.evict_tokens;
  ASSIGN_OR_RETURN(out_.plan, PlanLooks(o_.alpha, o_.max_samples));
  const LookPlan& plan = out_.plan;
  ASSIGN_OR_RETURN(log_, EvidenceLog::Open(o_.db_path, r_.campaign_id));
  RETURN_IF_ERROR(Record("campaign_start",
                         {{"command", "cache-audit"},
                          {"target", session_.root()},
                          {"tenants", r_.tenants},
                          {"alpha", o_.alpha},
                          {"alpha_per_look", plan.alpha_per_look},
                          {"looks", plan.looks},
                          {"max_samples", o_.max_samples},
                          {"prefix_tokens", o_.prefix_tokens},
                          {"salts", o_.salts}},
                         true));
  RETURN_IF_ERROR(session_.Discover());
  r_.model = session_.model();
  r_.limit = session_.advertised();
  r_.audit_started = true;  // the start checks passed: sizing probes
  RETURN_IF_ERROR(Size());
  RETURN_IF_ERROR(KvEvents());
  Progress(absl::StrFormat(
      "prefix of about %d tokens (%d letters); looks at %s per arm, alpha "
      "%.3g each",
      PrefixTokens(), out_.sizing.units, absl::StrJoin(plan.looks, ", "),
      plan.alpha_per_look));
  return absl::OkStatus();
}

absl::Status CacheAudit::RunPair() {
  const LookPlan& plan = out_.plan;
  size_t look = 0;
  while (!out_.level.has_value()) {
    RETURN_IF_ERROR(Round(out_.rounds));
    ++out_.rounds;
    if (out_.rounds < plan.looks[look]) continue;
    const bool last = TooManyFailures() || look + 1 == plan.looks.size();
    RETURN_IF_ERROR(Look(look, last));
    ++look;
  }
  if (out_.tests.cross_vs_control.p_value <= plan.alpha_per_look) {
    out_.fired.push_back("cache_timing");
  }
  if (out_.cached.cross_fired) out_.fired.push_back("cached_tokens");
  if (out_.tests.refusal.p_value <= plan.alpha_per_look) {
    out_.fired.push_back("cache_refusal");
  }
  for (const std::string& signal : out_.fired) {
    const std::vector<int64_t>& ids =
        signal == "cache_refusal" ? cross_failed_ids_ : cross_probe_ids_;
    RETURN_IF_ERROR(AddFinding(pair_ == nullptr
                                   ? CrossTenantFinding(out_, signal, ids)
                                   : SaltFinding({*pair_, out_}, signal, ids)));
  }
  return absl::OkStatus();
}

absl::Status CacheAudit::RunSaltPairs() {
  const CacheAuditOutcome start = out_;  // sizing, plan and notes
  for (const SaltPair& p : salt_pairs_) {
    pair_ = &p;
    party_[0] = p.writer;
    party_[1] = p.reader;
    const int64_t requests = out_.requests;
    out_ = start;
    out_.requests = requests;
    out_.writer = p.writer_label;
    out_.reader = p.reader_label;
    cross_probe_ids_.clear();
    cross_failed_ids_.clear();
    Progress(absl::StrFormat("%s: %s, then %s", p.check, p.writer_label,
                             p.reader_label));
    RETURN_IF_ERROR(RunPair());
    salt_out_.push_back({p, out_});
  }
  pair_ = nullptr;
  return absl::OkStatus();
}

absl::Status CacheAudit::Steps() {
  RETURN_IF_ERROR(Start());
  RETURN_IF_ERROR(o_.salts ? RunSaltPairs() : RunPair());
  return log_->Flush();
}

void CacheAudit::Finish(const absl::Status& run) {
  r_.ended_us = NowUs();
  out_.seconds = static_cast<double>(r_.ended_us - r_.started_us) / 1e6;
  if (run.ok() && o_.salts) {
    r_.detectors = SaltCoverage(salt_out_);
    r_.details = SaltDetails(salt_out_);
    r_.details["notes"] = out_.notes;
    r_.checks = SaltChecks(salt_out_);
  } else if (run.ok()) {
    r_.detectors = {CacheTimingCoverage(out_), CachedTokensCoverage(out_)};
    r_.details = CacheAuditDetails(out_);
    // Every key was checked; two are used.
    r_.details["tenants"] = TenantsUsedText(
        session_.options().tenants, {{0, "A, writer"}, {1, "B, reader"}});
    if (kv_out_.has_value()) {
      r_.detectors.push_back(kv_events::KvEventsCoverage(*kv_out_));
      r_.details["kv_events"] = kv_out_->ToJson();
    }
    r_.checks = CacheAuditChecks(out_);
  }
  DecideResult(&r_, run, {});
  r_.probes = out_.requests;
  // --salts: each pair run, and the one a failure stopped (pair_ set).
  std::vector<const CacheAuditOutcome*> runs;
  for (const SaltPairOutcome& p : salt_out_) runs.push_back(&p.out);
  if (!o_.salts || pair_ != nullptr) runs.push_back(&out_);
  for (const CacheAuditOutcome* run_out : runs) {
    for (const ArmSamples& s : run_out->arms) {
      r_.usable += static_cast<int64_t>(s.ttft_ms.size());
    }
  }
  r_.timeline = MakeTimeline(r_.started_us, r_.ended_us, probe_times_,
                             error_times_, r_.findings);
  std::string level =
      out_.level.has_value() ? SharingLevelName(*out_.level) : "-";
  if (o_.salts) {  // each check's: "salt_tenants same-tenant, ..."
    std::vector<std::string> levels;
    for (const SaltPairOutcome& p : salt_out_) {
      levels.push_back(absl::StrCat(
          p.pair.check, " ",
          SharingLevelName(p.out.level.value_or(SharingLevel::kUndecided))));
    }
    level = levels.empty() ? "-" : absl::StrJoin(levels, ", ");
  }
  SealResult(
      &r_, log_.get(),
      {{"requests", out_.requests}, {"rounds", out_.rounds}, {"level", level}},
      metrics_);
  Progress(absl::StrFormat("%s: level %s, %d requests, %.1f s",
                           VerdictName(r_.verdict), level.c_str(),
                           out_.requests, out_.seconds));
}

CampaignResult CacheAudit::Run() {
  std::vector<std::string> detectors = {"cache_timing", "cached_tokens"};
  if (o_.salts) {
    detectors = {"salt_same", "salt_tenants", "salt_salts", "salt_forged"};
    if (!o_.salt.tenant_header.empty()) detectors.push_back("salt_gateway");
  }
  if (!o_.kv_events.endpoint.empty()) detectors.push_back("kv_events");
  StartResult(&r_, "cache-audit", session_.root(), session_.options().tenants,
              o_.db_path, detectors, metrics_);
  absl::Status s = Steps();
  if (s.ok() && log_ != nullptr) s = log_->Flush();
  Finish(s);
  return std::move(r_);
}

}  // namespace

CampaignResult RunCacheAudit(const CacheAuditOptions& options,
                             AuditorMetrics* metrics) {
  return CacheAudit(options, metrics).Run();
}

}  // namespace kvcanary::auditor
