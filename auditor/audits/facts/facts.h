// `kvcanary-auditor facts`: what an endpoint reveals about itself —
// response headers, /v1/models metadata, the info/props/version/metrics/
// slots endpoints common engines expose (docs/targets.md) — recorded as
// evidence with each raw response's hash, and read into fields (engine
// family, version, context and input limits, streaming and usage
// behaviour, disaggregation and KV-checksum hints): "not revealed" where
// the endpoint does not say, never guessed. Exposure checks are findings:
// an endpoint readable without a key, or with one tenant's key, that shows
// other clients' prompts or activity is critical, proven by a marker one
// tenant plants and another (or no key) reads back.
#ifndef KVCANARY_AUDITOR_AUDITS_FACTS_FACTS_H_
#define KVCANARY_AUDITOR_AUDITS_FACTS_FACTS_H_

#include <string>
#include <vector>

#include "auditor/reports/metrics.h"
#include "auditor/result/result.h"
#include "auditor/target/target.h"

namespace kvcanary::auditor {

struct FactsOptions {
  TargetOptions target;  // tenants optional: without, only keyless probes
  // Engine node base URLs (--trace): their endpoints are in scope too.
  std::vector<std::string> node_urls;
  std::string db_path;
  std::string secret_key;  // HMAC key for the planted marker; empty: random
  bool progress = true;
};

CampaignResult RunFacts(const FactsOptions& options, AuditorMetrics* metrics);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_FACTS_FACTS_H_
