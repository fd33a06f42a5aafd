// The auditor's Prometheus metrics (prometheus-cpp). Counters are updated
// as probes complete and findings are made; /metrics only serializes them.
// Every finding kind and verdict is exported from 0 at start-up, so
// increase() sees the first one. Tenants and markers are never labels:
// kinds, outcomes, severities, detectors, states and verdicts only.
#ifndef KVCANARY_AUDITOR_REPORTS_METRICS_H_
#define KVCANARY_AUDITOR_REPORTS_METRICS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "auditor/result/coverage.h"
#include "auditor/target/spend.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace kvcanary::auditor {

// Every (kind, severity) a finding can have (docs/auditor.md).
extern const std::vector<std::pair<const char*, const char*>>
    kFindingKindSeverities;

// Thread-safe: every method takes mu_ (probes are counted from many
// threads while /metrics serializes).
// What a campaign's KV-cache event stream carried (kv_events::LedgerStats'
// counts; kv_events::StreamCounts makes one).
struct KvEventStreamCounts {
  int64_t messages = 0;     // ingested, replayed ones included
  int64_t replayed = 0;     // fetched again through the replay socket
  int64_t missing = 0;      // missing for good
  int64_t undecodable = 0;  // did not decode
  int64_t restarts = 0;     // publisher restarts
};

class AuditorMetrics {
 public:
  AuditorMetrics();
  // outcome: ok, http_4xx, http_5xx, transport_error, dropped_stream,
  // bad_response.
  void CountProbe(const std::string& kind, const std::string& outcome);
  void CountFinding(const std::string& kind, const std::string& severity);
  // The API the command's requests use ("completions" or "chat"):
  // kvcanary_auditor_target_api{api} 1 for it, 0 for the other.
  void SetTargetApi(const std::string& api);
  // A command's spend (auditor/target/spend.h), all tenants together (no
  // tenant is ever a label), added to kvcanary_auditor_tokens_total{kind}
  // and kvcanary_auditor_rate_limited_total.
  void CountSpend(const std::map<std::string, TenantSpend>& spend);
  // The last campaign's controls (detector -> passed); a detector whose
  // control did not run has no sample, rather than an old one.
  void SetPositiveControls(const std::map<std::string, bool>& passed);
  void CountTraceEvents(double consumed, double dropped);
  // A campaign's KV-cache event stream (--kv-events): messages ingested
  // (replayed ones included), fetched again through the replay socket,
  // missing for good, undecodable; publisher restarts.
  void CountKvEvents(const KvEventStreamCounts& stream);
  // The detectors of the command that is running (probe's: every
  // registered detector, auditor/detectors/registry.h): the ones a campaign
  // that ends in error marks inconclusive.
  void SetCommandDetectors(std::vector<std::string> names);
  // A campaign ended: its verdict, each detector's state and weakest
  // tenant's coverage (after an error, every detector of the command
  // inconclusive with coverage 0), its duration; and, only when it
  // `finished` (ran to its end, no error — a findings verdict proven before
  // the target died did not), the time it completed
  // (kvcanary_auditor_last_success_timestamp_seconds, behind the
  // KvcanaryAuditStale alert).
  void CampaignEnded(Verdict verdict, bool finished,
                     const std::vector<DetectorCoverage>& detectors,
                     double seconds, double unix_time);
  std::string Serialize() const;

 private:
  void RegisterStreamCounters();
  void RegisterSpendCounters();  // tokens_, rate_limited_

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* probes_;
  prometheus::Family<prometheus::Counter>* findings_;
  prometheus::Family<prometheus::Gauge>* positive_control_;
  prometheus::Family<prometheus::Gauge>* detector_state_;
  prometheus::Family<prometheus::Gauge>* detector_coverage_;
  prometheus::Family<prometheus::Gauge>* detector_floor_;
  prometheus::Family<prometheus::Gauge>* last_verdict_;
  prometheus::Family<prometheus::Gauge>* target_api_;
  prometheus::Family<prometheus::Counter>* tokens_;
  prometheus::Family<prometheus::Counter>* rate_limited_;
  prometheus::Family<prometheus::Counter>* campaigns_;
  prometheus::Counter* trace_consumed_;
  prometheus::Counter* trace_dropped_;
  prometheus::Counter* kv_ingested_;
  prometheus::Counter* kv_replayed_;
  prometheus::Counter* kv_missing_;
  prometheus::Counter* kv_undecodable_;
  prometheus::Counter* kv_restarts_;
  prometheus::Gauge* last_success_;
  prometheus::Gauge* duration_;
  mutable absl::Mutex mu_;
  std::vector<std::string> command_detectors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_REPORTS_METRICS_H_
