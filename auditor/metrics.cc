#include "auditor/metrics.h"

#include "prometheus/text_serializer.h"

namespace kvcanary::auditor {

AuditorMetrics::AuditorMetrics()
    : registry_(std::make_shared<prometheus::Registry>()) {
  probes_ = &prometheus::BuildCounter()
                 .Name("kvcanary_auditor_probes_total")
                 .Help("Probes sent, by kind and outcome")
                 .Register(*registry_);
  findings_ = &prometheus::BuildCounter()
                   .Name("kvcanary_auditor_findings_total")
                   .Help("Findings, by kind and severity")
                   .Register(*registry_);
  positive_control_ =
      &prometheus::BuildGauge()
           .Name("kvcanary_auditor_positive_control")
           .Help(
               "1 if the detector fired on its known-bad input at the start "
               "of the last campaign, 0 if it did not")
           .Register(*registry_);
  auto& trace =
      prometheus::BuildCounter()
          .Name("kvcanary_auditor_trace_events_total")
          .Help("Engine trace events, consumed or dropped by the node")
          .Register(*registry_);
  trace_consumed_ = &trace.Add({{"state", "consumed"}});
  trace_dropped_ = &trace.Add({{"state", "dropped"}});
  last_success_ = &prometheus::BuildGauge()
                       .Name("kvcanary_auditor_last_success_timestamp_seconds")
                       .Help("Unix time the last campaign completed")
                       .Register(*registry_)
                       .Add({});
  duration_ = &prometheus::BuildGauge()
                   .Name("kvcanary_auditor_campaign_duration_seconds")
                   .Help("How long the last campaign took")
                   .Register(*registry_)
                   .Add({});
  auto& campaigns = prometheus::BuildCounter()
                        .Name("kvcanary_auditor_campaigns_total")
                        .Help("Campaigns run, by result")
                        .Register(*registry_);
  campaigns_ok_ = &campaigns.Add({{"result", "completed"}});
  campaigns_failed_ = &campaigns.Add({{"result", "error"}});
}

void AuditorMetrics::CountProbe(const std::string& kind,
                                const std::string& outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  probes_->Add({{"kind", kind}, {"outcome", outcome}}).Increment();
}

void AuditorMetrics::CountFinding(const std::string& kind,
                                  const std::string& severity) {
  std::lock_guard<std::mutex> lock(mu_);
  findings_->Add({{"kind", kind}, {"severity", severity}}).Increment();
}

void AuditorMetrics::SetPositiveControl(const std::string& detector,
                                        bool passed) {
  std::lock_guard<std::mutex> lock(mu_);
  positive_control_->Add({{"detector", detector}}).Set(passed ? 1 : 0);
}

void AuditorMetrics::CountTraceEvents(double consumed, double dropped) {
  std::lock_guard<std::mutex> lock(mu_);
  trace_consumed_->Increment(consumed);
  trace_dropped_->Increment(dropped);
}

void AuditorMetrics::CampaignEnded(double seconds, bool completed,
                                   double unix_time) {
  std::lock_guard<std::mutex> lock(mu_);
  duration_->Set(seconds);
  if (completed) {
    last_success_->Set(unix_time);
    campaigns_ok_->Increment();
  } else {
    campaigns_failed_->Increment();
  }
}

std::string AuditorMetrics::Serialize() const {
  std::lock_guard<std::mutex> lock(mu_);
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace kvcanary::auditor
