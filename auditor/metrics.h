// The auditor's Prometheus metrics (prometheus-cpp). Counters are updated
// as probes complete and findings are made; /metrics only serializes them.
// Tenants and markers are never labels: kinds, outcomes and severities only.
#ifndef KVCANARY_AUDITOR_METRICS_H_
#define KVCANARY_AUDITOR_METRICS_H_

#include <memory>
#include <mutex>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace kvcanary::auditor {

class AuditorMetrics {
 public:
  AuditorMetrics();
  // outcome: ok, http_4xx, http_5xx, transport_error, bad_response.
  void CountProbe(const std::string& kind, const std::string& outcome);
  void CountFinding(const std::string& kind, const std::string& severity);
  void SetPositiveControl(const std::string& detector, bool passed);
  void CountTraceEvents(double consumed, double dropped);
  // A campaign ended: its duration, and if it completed, the time.
  void CampaignEnded(double seconds, bool completed, double unix_time);
  std::string Serialize() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* probes_;
  prometheus::Family<prometheus::Counter>* findings_;
  prometheus::Family<prometheus::Gauge>* positive_control_;
  prometheus::Counter* trace_consumed_;
  prometheus::Counter* trace_dropped_;
  prometheus::Gauge* last_success_;
  prometheus::Gauge* duration_;
  prometheus::Counter* campaigns_ok_;
  prometheus::Counter* campaigns_failed_;
  mutable std::mutex mu_;
};

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_METRICS_H_
