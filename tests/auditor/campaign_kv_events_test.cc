// probe --kv-events: a whole campaign against a scripted vLLM whose prompt
// cache publishes its block events (tests/auditor/fake_kv_publisher.h),
// with the campaign's own load on the same stream: the kv_events detector
// joins the others, clean where the cache is salted per key, a finding
// where it is shared.
#include <unistd.h>

#include <memory>
#include <string>

#include "auditor/campaign.h"
#include "auditor/result_text.h"
#include "gtest/gtest.h"
#include "tests/auditor/fake_kv_publisher.h"
#include "tests/auditor/fake_target.h"

namespace kvcanary::auditor {
namespace {

using testing::EncodeBatch;
using testing::FakeKvPublisher;
using testing::FakeTarget;
using testing::FakeTargetOptions;
using testing::Flavor;

struct Engine {
  explicit Engine(bool shared) {
    FakeTargetOptions o;
    o.flavor = Flavor::kVllm;
    o.limit_tokens = 400;
    o.prefill_us_per_token = 250;
    o.cache_block_tokens = 8;
    o.shared_prompt_cache = shared;
    o.per_key_prompt_cache = !shared;
    o.on_blocks_stored =
        [this](const std::vector<FakeTargetOptions::StoredBlock>& blocks) {
          publisher.Publish(EncodeBatch({testing::StoredEvent(blocks, 8)}));
        };
    target = std::make_unique<FakeTarget>(o);
  }
  FakeKvPublisher publisher;
  std::unique_ptr<FakeTarget> target;
};

CampaignResult Campaign(const Engine& e, const std::string& name) {
  CampaignOptions o;
  o.target = e.target->url();
  o.tenants = {{"acme", "sk-a"}, {"globex", "sk-g"}, {"initech", "sk-i"}};
  o.db_path = ::testing::TempDir() + "/kvcanary-campaign-kv-" +
              std::to_string(getpid()) + "-" + name + ".db";
  o.max_probes = 360;
  o.duration = absl::Seconds(60);
  o.progress = false;
  o.floors = {{"", 12}};
  o.kv_events = *kv_events::ParseKvEventsFlag(e.publisher.flag());
  AuditorMetrics metrics;
  return RunCampaign(o, &metrics);
}

const DetectorCoverage* KvDetector(const CampaignResult& r) {
  for (const DetectorCoverage& d : r.detectors) {
    if (d.name == "kv_events") return &d;
  }
  return nullptr;
}

// What the auditor would print, for failure messages.
std::string Explain(const CampaignResult& r) { return ResultText(r, 20); }

TEST(CampaignKvEventsTest, ASaltedCacheIsCleanWithTheKvEventsDetectorActive) {
  Engine e(/*shared=*/false);
  const CampaignResult r = Campaign(e, "salted");
  const DetectorCoverage* d = KvDetector(r);
  ASSERT_NE(d, nullptr) << Explain(r);
  EXPECT_EQ(d->state, DetectorState::kActive) << d->reason;
  EXPECT_EQ(r.ToJson()["kv_events"]["isolated_pairs"], 3);
  EXPECT_EQ(r.verdict, Verdict::kClean) << Explain(r);
}

TEST(CampaignKvEventsTest, ASharedCacheIsAKvEventsFindingAmidTheLoad) {
  Engine e(/*shared=*/true);
  const CampaignResult r = Campaign(e, "shared");
  int kv = 0;
  for (const Finding& f : r.findings) {
    kv += f.detector == "kv_events" && f.kind == "cross_tenant_kv_block_hit";
  }
  EXPECT_EQ(kv, 3) << Explain(r);
  EXPECT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
}

}  // namespace
}  // namespace kvcanary::auditor
