// One audit campaign against an OpenAI-compatible endpoint: act as several
// tenants at once, plant canary markers and hunt for them, probe golden
// answers, echoes, the advertised input limit and first-token latency,
// follow engine trace streams into shadow ledgers, and record everything
// (ids, hashes, timings; never text the auditor did not write) in the
// hash-chained evidence store. See docs/auditor.md.
#ifndef KVCANARY_AUDITOR_CAMPAIGN_H_
#define KVCANARY_AUDITOR_CAMPAIGN_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "auditor/audit_tenants.h"
#include "auditor/findings.h"
#include "auditor/metrics.h"

namespace kvcanary::auditor {

struct CampaignOptions {
  std::string target;  // base URL, e.g. http://127.0.0.1:8000
  std::vector<AuditTenant> tenants;
  std::vector<std::string> trace_urls;  // engine nodes (base URLs)
  std::string db_path;
  absl::Duration duration = absl::Seconds(30);
  int max_probes = 0;  // 0: until `duration`
  int concurrency = 8;
  double max_rate = 200;      // probes per second
  std::string secret_key;     // HMAC key for markers; empty: random
  std::string model;          // the request's "model"; empty: from /v1/models
  int max_prompt_tokens = 0;  // advertised input limit; 0: from /v1/models
  absl::Duration request_timeout = absl::Seconds(30);
  bool progress = true;  // progress lines on stderr
};

struct CampaignResult {
  std::string campaign_id;
  int64_t probes = 0;
  int64_t probe_errors = 0;  // no usable answer (transport, bad JSON, 5xx)
  std::vector<Finding> findings;
  std::map<std::string, bool> positive_controls;
  // detector -> "active" or "disabled: <why>" (e.g. not calibrated).
  std::map<std::string, std::string> detectors;
  uint64_t trace_events = 0, trace_dropped = 0;
  absl::Duration elapsed;
};

// Runs one campaign. An error (exit code 2) when the campaign cannot vouch
// for anything: a positive control failed, the target or a trace node is
// unreachable or answers garbage, the evidence store cannot be written, or
// most probes got no usable answer. Findings are results, not errors.
absl::StatusOr<CampaignResult> RunCampaign(const CampaignOptions& options,
                                           AuditorMetrics* metrics);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_CAMPAIGN_H_
