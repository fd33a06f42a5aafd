#include "auditor/reports/metrics.h"

#include <algorithm>
#include <climits>
#include <iterator>
#include <set>
#include <utility>

#include "prometheus/text_serializer.h"

namespace kvcanary::auditor {

const std::vector<std::pair<const char*, const char*>> kFindingKindSeverities =
    {{"foreign_marker", "critical"},
     {"foreign_marker", "high"},
     {"foreign_marker_shape", "high"},
     {"golden_mismatch", "medium"},
     {"golden_mismatch", "critical"},
     {"golden_divergence_rate", "high"},
     {"echo_failure", "high"},
     {"boundary_accepted", "high"},
     {"prompt_truncated", "high"},
     {"prompt_tokens_mismatch", "high"},
     {"latency_implausible", "medium"},
     {"trace_foreign_tenant_read", "critical"},
     {"trace_late_write", "critical"},
     {"trace_stale_request_read", "high"},
     {"trace_transfer_mismatch", "high"},
     {"trace_engine_violation", "high"},
     {"trace_unwritten_read", "medium"}};

namespace {
constexpr Verdict kVerdicts[] = {Verdict::kClean, Verdict::kFindings,
                                 Verdict::kError, Verdict::kInconclusive};
constexpr DetectorState kStates[] = {DetectorState::kActive,
                                     DetectorState::kInconclusive,
                                     DetectorState::kDisabled};
}  // namespace

AuditorMetrics::AuditorMetrics()
    : registry_(std::make_shared<prometheus::Registry>()) {
  probes_ = &prometheus::BuildCounter()
                 .Name("kvcanary_auditor_probes_total")
                 .Help("Probes sent, by kind and outcome")
                 .Register(*registry_);
  RegisterSpendCounters();
  findings_ = &prometheus::BuildCounter()
                   .Name("kvcanary_auditor_findings_total")
                   .Help("Finding rows, by kind and severity")
                   .Register(*registry_);
  for (const auto& [kind, severity] : kFindingKindSeverities) {
    findings_->Add({{"kind", kind}, {"severity", severity}});
  }
  positive_control_ =
      &prometheus::BuildGauge()
           .Name("kvcanary_auditor_positive_control")
           .Help(
               "1 if the detector fired on its known-bad input in the last "
               "campaign, 0 if it did not")
           .Register(*registry_);
  detector_state_ =
      &prometheus::BuildGauge()
           .Name("kvcanary_auditor_detector_state")
           .Help(
               "1 for each detector's state in the last campaign (active, "
               "inconclusive, disabled), 0 for the others")
           .Register(*registry_);
  detector_coverage_ =
      &prometheus::BuildGauge()
           .Name("kvcanary_auditor_detector_coverage")
           .Help(
               "The weakest tenant's coverage of each detector in the last "
               "campaign (its unit: docs/auditor.md)")
           .Register(*registry_);
  detector_floor_ = &prometheus::BuildGauge()
                         .Name("kvcanary_auditor_detector_floor")
                         .Help("Each detector's coverage floor per tenant")
                         .Register(*registry_);
  last_verdict_ =
      &prometheus::BuildGauge()
           .Name("kvcanary_auditor_last_verdict")
           .Help(
               "1 for the last campaign's verdict (clean, findings, error, "
               "inconclusive), 0 for the others")
           .Register(*registry_);
  target_api_ = &prometheus::BuildGauge()
                     .Name("kvcanary_auditor_target_api")
                     .Help(
                         "1 for the OpenAI API the last command's requests "
                         "used (completions, chat), 0 for the other")
                     .Register(*registry_);
  campaigns_ = &prometheus::BuildCounter()
                    .Name("kvcanary_auditor_campaigns_total")
                    .Help("Campaigns run, by verdict")
                    .Register(*registry_);
  for (Verdict v : kVerdicts) {
    last_verdict_->Add({{"verdict", VerdictName(v)}});
    campaigns_->Add({{"result", VerdictName(v)}});
  }
  RegisterStreamCounters();
  last_success_ =
      &prometheus::BuildGauge()
           .Name("kvcanary_auditor_last_success_timestamp_seconds")
           .Help(
               "Unix time the last campaign that finished (ran to its end, "
               "no error) ended")
           .Register(*registry_)
           .Add({});
  duration_ = &prometheus::BuildGauge()
                   .Name("kvcanary_auditor_campaign_duration_seconds")
                   .Help("How long the last campaign took")
                   .Register(*registry_)
                   .Add({});
}

// The engine streams the auditor follows: trace events and the KV-cache
// event stream.
void AuditorMetrics::RegisterSpendCounters() {
  tokens_ = &prometheus::BuildCounter()
                 .Name("kvcanary_auditor_tokens_total")
                 .Help(
                     "Tokens the target reported spent on the auditor's "
                     "requests, by tenant and kind (prompt, cached, "
                     "completion; cached is part of prompt)")
                 .Register(*registry_);
  rate_limited_ = &prometheus::BuildCounter()
                       .Name("kvcanary_auditor_rate_limited_total")
                       .Help(
                           "Answers 429/503 (a provider's rate limit), "
                           "by tenant; each was sent again after its wait")
                       .Register(*registry_);
}

void AuditorMetrics::RegisterStreamCounters() {
  auto& trace =
      prometheus::BuildCounter()
          .Name("kvcanary_auditor_trace_events_total")
          .Help("Engine trace events, consumed or dropped by the node")
          .Register(*registry_);
  trace_consumed_ = &trace.Add({{"state", "consumed"}});
  trace_dropped_ = &trace.Add({{"state", "dropped"}});
  auto& kv_messages =
      prometheus::BuildCounter()
          .Name("kvcanary_auditor_kv_events_messages_total")
          .Help(
              "KV-cache event stream messages (--kv-events): ingested "
              "(replayed ones included), replayed, missing for good, "
              "undecodable")
          .Register(*registry_);
  kv_ingested_ = &kv_messages.Add({{"outcome", "ingested"}});
  kv_replayed_ = &kv_messages.Add({{"outcome", "replayed"}});
  kv_missing_ = &kv_messages.Add({{"outcome", "missing"}});
  kv_undecodable_ = &kv_messages.Add({{"outcome", "undecodable"}});
  kv_restarts_ = &prometheus::BuildCounter()
                      .Name("kvcanary_auditor_kv_events_restarts_total")
                      .Help(
                          "Restarts of the KV-cache event stream's publisher "
                          "(its sequence numbers went back)")
                      .Register(*registry_)
                      .Add({});
}

void AuditorMetrics::CountProbe(const std::string& kind,
                                const std::string& outcome) {
  absl::MutexLock lock(&mu_);
  probes_->Add({{"kind", kind}, {"outcome", outcome}}).Increment();
}

void AuditorMetrics::CountSpend(
    const std::map<std::string, TenantSpend>& spend) {
  // Never a tenant label: no tenant name is ever exported as one.
  absl::MutexLock lock(&mu_);
  for (const auto& [tenant, s] : spend) {
    tokens_->Add({{"kind", "prompt"}})
        .Increment(static_cast<double>(s.prompt_tokens));
    tokens_->Add({{"kind", "cached"}})
        .Increment(static_cast<double>(s.cached_tokens));
    tokens_->Add({{"kind", "completion"}})
        .Increment(static_cast<double>(s.completion_tokens));
    rate_limited_->Add({}).Increment(static_cast<double>(s.rate_limited));
  }
}

void AuditorMetrics::SetTargetApi(const std::string& api) {
  absl::MutexLock lock(&mu_);
  for (const char* a : {"completions", "chat"}) {
    target_api_->Add({{"api", a}}).Set(api == a ? 1 : 0);
  }
}

void AuditorMetrics::CountFinding(const std::string& kind,
                                  const std::string& severity) {
  absl::MutexLock lock(&mu_);
  findings_->Add({{"kind", kind}, {"severity", severity}}).Increment();
}

void AuditorMetrics::SetPositiveControls(
    const std::map<std::string, bool>& passed) {
  absl::MutexLock lock(&mu_);
  std::set<std::string> names(command_detectors_.begin(),
                              command_detectors_.end());
  for (const auto& [d, ok] : passed) names.insert(d);
  for (const std::string& d : names) {
    prometheus::Gauge& g = positive_control_->Add({{"detector", d}});
    auto it = passed.find(d);
    if (it == passed.end()) {
      positive_control_->Remove(&g);
    } else {
      g.Set(it->second ? 1 : 0);
    }
  }
}

void AuditorMetrics::SetCommandDetectors(std::vector<std::string> names) {
  absl::MutexLock lock(&mu_);
  command_detectors_ = std::move(names);
}

void AuditorMetrics::CountTraceEvents(double consumed, double dropped) {
  absl::MutexLock lock(&mu_);
  trace_consumed_->Increment(consumed);
  trace_dropped_->Increment(dropped);
}

void AuditorMetrics::CountKvEvents(const KvEventStreamCounts& stream) {
  absl::MutexLock lock(&mu_);
  kv_ingested_->Increment(static_cast<double>(stream.messages));
  kv_replayed_->Increment(static_cast<double>(stream.replayed));
  kv_missing_->Increment(static_cast<double>(stream.missing));
  kv_undecodable_->Increment(static_cast<double>(stream.undecodable));
  kv_restarts_->Increment(static_cast<double>(stream.restarts));
}

void AuditorMetrics::CampaignEnded(
    Verdict verdict, bool finished,
    const std::vector<DetectorCoverage>& detectors, double seconds,
    double unix_time) {
  absl::MutexLock lock(&mu_);
  duration_->Set(seconds);
  for (Verdict v : kVerdicts) {
    last_verdict_->Add({{"verdict", VerdictName(v)}}).Set(v == verdict ? 1 : 0);
  }
  campaigns_->Add({{"result", VerdictName(verdict)}}).Increment();
  if (finished) last_success_->Set(unix_time);
  if (detectors.empty()) {
    // A campaign that could not run vouches for no detector.
    for (const std::string& d : command_detectors_) {
      for (DetectorState s : kStates) {
        detector_state_->Add({{"detector", d}, {"state", DetectorStateName(s)}})
            .Set(s == DetectorState::kInconclusive ? 1 : 0);
      }
      detector_coverage_->Add({{"detector", d}}).Set(0);
    }
  }
  for (const DetectorCoverage& d : detectors) {
    for (DetectorState s : kStates) {
      detector_state_
          ->Add({{"detector", d.name}, {"state", DetectorStateName(s)}})
          .Set(s == d.state ? 1 : 0);
    }
    int weakest = d.coverage.empty() ? 0 : INT_MAX;
    for (const auto& [tenant, n] : d.coverage) weakest = std::min(weakest, n);
    detector_coverage_->Add({{"detector", d.name}}).Set(weakest);
    detector_floor_->Add({{"detector", d.name}}).Set(d.floor);
  }
}

std::string AuditorMetrics::Serialize() const {
  absl::MutexLock lock(&mu_);
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace kvcanary::auditor
