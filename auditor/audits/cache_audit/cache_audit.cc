// kvcanary-auditor cache-audit (cache_audit.h): the course of one audit
// (cache_audit_internal.h): its start (the evidence log, discovery, the
// cache tiers the target states and the fillers they call for, the
// prefix's sizing, the kv_events pairs), the pairs of tenants or salts run
// to a level, and the verdict with its coverage, sealed into the evidence.
#include "auditor/audits/cache_audit/cache_audit.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "auditor/audits/cache_audit/cache_audit_internal.h"
#include "auditor/audits/cache_audit/decision.h"
#include "auditor/audits/cache_audit/report.h"
#include "auditor/campaign/command_result.h"
#include "auditor/target/cache_tiers.h"
#include "auditor/target/http_client.h"
#include "common/clock.h"
#include "common/status_macros.h"

namespace kvcanary::auditor {
namespace cache_audit_internal {

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
  if (out_.evict_tokens > 0) {
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

void CacheAudit::Tiers() {
  out_.tiers =
      ReadCacheTiers(HttpClient(), session_.root(), session_.Headers(tenant(0)),
                     session_.options().request_timeout);
  out_.evict_tokens = o_.evict_tokens;
  out_.evict_from = "--evict-tokens";
  if (o_.evict_tokens < 0) {
    out_.evict_tokens = out_.tiers.DefaultEvictTokens();
    out_.evict_from =
        out_.evict_tokens > 0
            ? absl::StrCat("default: 1.25 x the first tier (",
                           out_.tiers.first_tier_where, ")")
            : "default: 0 (the target states no second tier and first tier)";
  }
  if (out_.tiers.second_tier) {
    Progress(absl::StrFormat(
        "second KV tier reported (%s); fillers of %d tokens after each prime "
        "(%s)",
        out_.tiers.second_tier_where, out_.evict_tokens, out_.evict_from));
  }
  std::string unchecked = out_.tiers.Unchecked(out_.evict_tokens);
  if (!unchecked.empty()) problems_.push_back(std::move(unchecked));
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
  r_.api = ApiName(session_.api());
  metrics_->SetTargetApi(r_.api);
  r_.limit = session_.advertised();
  r_.audit_started = true;  // the start checks passed: sizing probes
  Tiers();
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
  NoteSpend(&r_, session_.spend());
  DecideResult(&r_, run, problems_);
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

}  // namespace cache_audit_internal

CampaignResult RunCacheAudit(const CacheAuditOptions& options,
                             AuditorMetrics* metrics) {
  return cache_audit_internal::CacheAudit(options, metrics).Run();
}

}  // namespace kvcanary::auditor
