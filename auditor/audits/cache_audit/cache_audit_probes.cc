// One cache audit's requests (cache_audit_internal.h): the prefix sized
// from two cache-busted prompts, an arm's sample (A's prime, the fillers
// that push it out of the first tier, the probe), a round of the four arms
// in a fresh order, and the looks at the tests; every request an evidence
// row.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "auditor/audits/cache_audit/cache_audit_internal.h"
#include "auditor/audits/cache_audit/decision.h"
#include "common/clock.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace kvcanary::auditor::cache_audit_internal {
namespace {

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
bool KeyRefused(int status) { return status == 401 || status == 403; }

}  // namespace

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
  if (out_.evict_tokens <= 0) return absl::OkStatus();
  // Fillers as long as the prime: each is cached like it, so together
  // they push it out of a least-recently-used first tier.
  const int per = std::max(1, PrefixTokens());
  const int n = (out_.evict_tokens + per - 1) / per;
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

}  // namespace kvcanary::auditor::cache_audit_internal
