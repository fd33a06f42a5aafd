// What the campaign tests share: the fakes' options they start from, a
// campaign's options against one, and readers of its result.
#ifndef KVCANARY_TESTS_AUDITOR_CAMPAIGN_CAMPAIGN_FIXTURES_H_
#define KVCANARY_TESTS_AUDITOR_CAMPAIGN_CAMPAIGN_FIXTURES_H_

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "auditor/campaign/campaign.h"
#include "auditor/reports/report.h"
#include "gtest/gtest.h"
#include "tests/auditor/fakes/fake_target.h"
#include "tests/temp_path.h"

namespace kvcanary::auditor::campaign_fixtures {

using testing::FakeTargetOptions;
using testing::Flavor;

inline std::string Db(const std::string& name) {
  return testing_paths::UniqueTempPath("kvcanary-campaign", name + ".db");
}

inline CampaignOptions Options(const std::string& target,
                               const std::string& name) {
  CampaignOptions o;
  o.target = target;
  o.tenants = {{"acme", "sk-a"}, {"globex", "sk-g"}, {"initech", "sk-i"}};
  o.db_path = Db(name);
  o.max_probes = 360;
  o.duration = absl::Seconds(60);
  o.concurrency = 8;
  o.progress = false;
  o.floors = {{"", 12}};
  return o;
}

inline std::string Explain(const CampaignResult& r) {
  std::string out = absl::StrCat(VerdictName(r.verdict), ": ",
                                 absl::StrJoin(r.reasons, "; "), "\n");
  for (const DetectorCoverage& d : r.detectors) {
    absl::StrAppend(&out, d.name, " ", DetectorStateName(d.state), " ",
                    d.reason, " [", d.CoverageText(), "]\n");
  }
  absl::StrAppend(&out, IncidentTable(r.incidents, 20));
  return out;
}

inline const DetectorCoverage* CoverageOf(const CampaignResult& r,
                                          const std::string& name) {
  for (const DetectorCoverage& d : r.detectors) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

inline int Count(const CampaignResult& r, const std::string& kind) {
  int n = 0;
  for (const Finding& f : r.findings) n += f.kind == kind;
  return n;
}

inline FakeTargetOptions Fake(Flavor flavor) {
  FakeTargetOptions o;
  o.flavor = flavor;
  o.limit_tokens = 400;
  // 100 ms of prefill at the limit: a slope a loaded machine cannot hide.
  o.prefill_us_per_token = 250;
  return o;
}

// "llamacpp" for llama.cpp: a test name of the flavor.
inline std::string FlavorParamName(
    const ::testing::TestParamInfo<Flavor>& info) {
  std::string name(testing::FlavorName(info.param));
  name.erase(std::remove(name.begin(), name.end(), '.'), name.end());
  return name;
}

}  // namespace kvcanary::auditor::campaign_fixtures

#endif  // KVCANARY_TESTS_AUDITOR_CAMPAIGN_CAMPAIGN_FIXTURES_H_
