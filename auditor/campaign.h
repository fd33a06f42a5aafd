// One audit campaign against an OpenAI-compatible endpoint: act as several
// tenants at once, plant canary markers and hunt for them, probe golden
// answers, echoes, the input limit and first-token latency, follow engine
// trace streams into shadow ledgers, and record everything (ids, hashes,
// timings; never text the auditor did not write) in the hash-chained
// evidence store. It ends in one verdict with the coverage that earned it
// (auditor/coverage.h), findings grouped into incidents. docs/auditor.md.
#ifndef KVCANARY_AUDITOR_CAMPAIGN_H_
#define KVCANARY_AUDITOR_CAMPAIGN_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "auditor/audit_tenants.h"
#include "auditor/calibration.h"
#include "auditor/coverage.h"
#include "auditor/findings.h"
#include "auditor/incidents.h"
#include "auditor/kv_events_subscriber.h"
#include "auditor/metrics.h"
#include "auditor/target_limits.h"
#include "auditor/trace_join.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

struct CampaignOptions {
  std::string target;  // base URL, e.g. http://127.0.0.1:8000
  std::vector<AuditTenant> tenants;
  std::vector<std::string> trace_urls;  // engine nodes (base URLs)
  std::string trace_token;  // their /v1/trace admin token ("" sends none)
  tls::Files trace_tls;     // the nodes' mutual TLS, if they require it
  std::string db_path;
  absl::Duration duration = absl::Seconds(30);
  int max_probes = 0;  // 0: until `duration`
  int concurrency = 8;
  double max_rate = 200;      // probes per second
  std::string secret_key;     // HMAC key for markers; empty: random
  std::string model;          // the request's "model"; empty: from /v1/models
  int max_prompt_tokens = 0;  // the input limit; 0: advertised or measured
  absl::Duration request_timeout = absl::Seconds(30);
  // Coverage floors per tenant: "" key is the default for every detector.
  std::map<std::string, int> floors = {{"", kDefaultFloor}};
  // Detectors that must reach their floor for `clean`; empty: the default
  // (every detector but echo on a model that never echoes alone and trace
  // without trace_urls).
  std::set<std::string> required;
  // Consecutive requests without an HTTP answer before the campaign stops:
  // "target down".
  int max_consecutive_failures = 20;
  int max_ladder_tokens = 16384;  // how far the limit ladder climbs
  bool progress = true;           // progress lines on stderr
  // The target engine's KV-cache event stream (--kv-events): followed from
  // the start, its probe pairs run after the load (the kv_events detector,
  // auditor/kv_events_probe.h, required when given). Empty endpoint: none.
  kv_events::SubscriberOptions kv_events;
};

struct PlantStats {
  std::string form;
  int markers_per_plant = 0;
  int prompt_tokens = 0;  // median measured alone
  double fill = 0;        // prompt_tokens / limit
  int64_t sent = 0, accepted_whole = 0;
};

// Probes, errors and findings per time bucket, for the report's chart.
struct Timeline {
  double bucket_s = 1;
  std::vector<int64_t> probes, errors, findings;
};

// One check a command states (accept: "echo" at "length 257, end").
struct Check {
  std::string check;
  std::string subject;
  std::string state;  // passed, failed, skipped or error
  std::string message;
};

struct CampaignResult {
  // probe, accept, facts, cache-audit or forensics: every command ends in
  // this result, its verdict and its reports.
  std::string command = "probe";
  std::string campaign_id;
  std::string target, model;
  std::vector<std::string> tenants;
  int64_t started_us = 0, ended_us = 0;
  absl::Duration elapsed;
  Verdict verdict = Verdict::kError;
  std::vector<std::string> reasons;  // why not clean
  TargetLimit limit;
  PlantStats plants;
  int64_t probes = 0, usable = 0;
  std::map<std::string, int64_t> by_kind, by_outcome;
  std::map<std::string, bool> positive_controls;
  std::vector<DetectorCoverage> detectors;
  std::vector<Finding> findings;  // raw rows, as recorded
  std::vector<Incident> incidents;
  std::vector<TraceNodeStats> trace_nodes;
  Timeline timeline;
  std::string db_path;
  int64_t first_seq = 0, last_seq = 0;  // this campaign's evidence rows
  std::vector<Check> checks;            // commands that state them
  // The command's own results, under the command's name in the document
  // ("accept", "facts", "cache_audit", "forensics").
  nlohmann::json details = nlohmann::json::object();

  int exit_code() const { return static_cast<int>(verdict); }
  // The campaign-result document (docs/campaign-result.schema.json).
  nlohmann::json ToJson() const;
};

// Probes, errors and findings (by their ts_us) in buckets over
// [started_us, ended_us]: at least 1 s each, at most 120 buckets.
Timeline MakeTimeline(int64_t started_us, int64_t ended_us,
                      const std::vector<int64_t>& probe_us,
                      const std::vector<int64_t>& error_us,
                      const std::vector<Finding>& findings);

// Runs one campaign. Never fails silently: a campaign that could not run
// (the target or a trace node unreachable, a key refused at the start, the
// evidence store unwritable, the target down mid-run) is verdict `error`
// with the reason; everything else is judged by DecideVerdict.
CampaignResult RunCampaign(const CampaignOptions& options,
                           AuditorMetrics* metrics);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_CAMPAIGN_H_
