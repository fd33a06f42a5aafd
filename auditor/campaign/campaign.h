// One audit campaign against an OpenAI-compatible endpoint: act as several
// tenants at once, plant canary markers and hunt for them, probe golden
// answers, echoes, the input limit and first-token latency, follow engine
// trace streams into shadow ledgers, and record everything (ids, hashes,
// timings; never text the auditor did not write) in the hash-chained
// evidence store. It ends in one verdict with the coverage that earned it
// (auditor/result/coverage.h), findings grouped into incidents.
// docs/auditor.md.
#ifndef KVCANARY_AUDITOR_CAMPAIGN_CAMPAIGN_H_
#define KVCANARY_AUDITOR_CAMPAIGN_CAMPAIGN_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "auditor/kv_events/subscriber.h"
#include "auditor/reports/metrics.h"
#include "auditor/result/coverage.h"
#include "auditor/result/result.h"
#include "auditor/target/target.h"
#include "auditor/target/tenants.h"
#include "common/tls.h"

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
  // (every registered detector required by default that applies: not echo
  // on a model that never echoes alone, trace without trace_urls, kv_events
  // without a stream). auditor/detectors/registry.h.
  std::set<std::string> required;
  // Testing only (--test-break): detectors broken on purpose, to show their
  // positive controls fail (auditor/detectors/broken.h).
  std::set<std::string> broken;
  // Consecutive requests without an HTTP answer before the campaign stops:
  // "target down".
  int max_consecutive_failures = 20;
  Api api = Api::kAuto;  // --api
  // --budget-tokens: the most tokens (prompt + completion, calibration
  // included) the campaign may spend; 0: no limit. New probes stop once
  // the next might pass it; the verdict follows coverage, the budget named
  // where floors were not reached.
  int64_t budget_tokens = 0;
  int max_ladder_tokens = 16384;  // how far the limit ladder climbs
  bool progress = true;           // progress lines on stderr
  // The target engine's KV-cache event stream (--kv-events): followed from
  // the start, its probe pairs run after the load (the kv_events detector,
  // auditor/detectors/kv_events.cc, required when given). Empty endpoint:
  // none.
  kv_events::SubscriberOptions kv_events;
};

// Runs one campaign. Never fails silently: a campaign that could not run
// or stopped early (the target or a trace node unreachable, a key refused
// at the start, the evidence store unwritable, the target down mid-run)
// has the reason in `error`, and its verdict is DecideVerdict's: `error`,
// unless findings proven after its start checks outrank it.
CampaignResult RunCampaign(const CampaignOptions& options,
                           AuditorMetrics* metrics);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_CAMPAIGN_CAMPAIGN_H_
