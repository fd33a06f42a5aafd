// probe --kv-events: a whole campaign against a scripted vLLM whose prompt
// cache publishes its block events (tests/auditor/fakes/fake_kv_publisher.h),
// with the campaign's own load on the same stream: the kv_events detector
// joins the others, clean where the cache is salted per key, a finding
// where it is shared.
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "auditor/campaign/campaign.h"
#include "auditor/reports/result_text.h"
#include "gtest/gtest.h"
#include "tests/auditor/fakes/fake_kv_publisher.h"
#include "tests/auditor/fakes/fake_target.h"
#include "tests/temp_path.h"

namespace kvcanary::auditor {
namespace {

using testing::EncodeBatch;
using testing::FakeKvPublisher;
using testing::FakeTarget;
using testing::FakeTargetOptions;
using testing::Flavor;

struct Engine {
  // lose_every: every so many batches is lost for good (neither sent nor
  // kept for replay); 0: none.
  explicit Engine(bool shared, int lose_every = 0) {
    FakeTargetOptions o;
    o.flavor = Flavor::kVllm;
    o.limit_tokens = 400;
    o.prefill_us_per_token = 250;
    o.cache_block_tokens = 8;
    o.shared_prompt_cache = shared;
    o.per_key_prompt_cache = !shared;
    o.on_blocks_stored =
        [this, lose_every](
            const std::vector<FakeTargetOptions::StoredBlock>& blocks) {
          const bool lose = lose_every > 0 && ++batches % lose_every == 0;
          publisher.Publish(EncodeBatch({testing::StoredEvent(blocks, 8)}),
                            /*drop=*/lose, /*forget=*/lose);
        };
    target = std::make_unique<FakeTarget>(o);
  }
  FakeKvPublisher publisher;
  std::atomic<int> batches{0};  // the fake server may call from any thread
  std::unique_ptr<FakeTarget> target;
};

CampaignResult Campaign(
    const Engine& e, const std::string& name, AuditorMetrics* metrics,
    const std::function<void(CampaignOptions*)>& tweak = nullptr) {
  CampaignOptions o;
  o.target = e.target->url();
  o.tenants = {{"acme", "sk-a"}, {"globex", "sk-g"}, {"initech", "sk-i"}};
  o.db_path =
      testing_paths::UniqueTempPath("kvcanary-campaign-kv", name + ".db");
  o.max_probes = 360;
  o.duration = absl::Seconds(60);
  o.progress = false;
  o.floors = {{"", 12}};
  o.kv_events = *kv_events::ParseKvEventsFlag(e.publisher.flag());
  if (tweak) tweak(&o);
  return RunCampaign(o, metrics);
}

// The sample of `name{outcome="..."}` (or of `name` unlabelled) in the
// metrics text; -1 if absent.
double Sample(const std::string& metrics, const std::string& series) {
  const size_t at = metrics.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(metrics.substr(at + series.size() + 2));
}

std::string Messages(const char* outcome) {
  return std::string("kvcanary_auditor_kv_events_messages_total{outcome=\"") +
         outcome + "\"}";
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
  AuditorMetrics metrics;
  const CampaignResult r = Campaign(e, "salted", &metrics);
  const DetectorCoverage* d = KvDetector(r);
  ASSERT_NE(d, nullptr) << Explain(r);
  EXPECT_EQ(d->state, DetectorState::kActive) << d->reason;
  EXPECT_EQ(r.ToJson()["kv_events"]["isolated_pairs"], 3);
  EXPECT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  // The sidecar's metrics count the stream it followed.
  const std::string m = metrics.Serialize();
  EXPECT_EQ(Sample(m, Messages("ingested")),
            r.ToJson()["kv_events"]["stream"]["messages"].get<double>())
      << m;
  EXPECT_GT(Sample(m, Messages("ingested")), 0) << m;
  EXPECT_EQ(Sample(m, Messages("missing")), 0) << m;
  EXPECT_EQ(Sample(m, "kvcanary_auditor_kv_events_restarts_total"), 0) << m;
}

// Batches lost for good: the detector cannot vouch for the pairs whose
// window they fell in, and the metrics say how many went missing, for an
// alert (dashboards/alerts.yml) to act on.
TEST(CampaignKvEventsTest, ALossyStreamIsInconclusiveAndCountedMissing) {
  Engine e(/*shared=*/false, /*lose_every=*/2);
  AuditorMetrics metrics;
  const CampaignResult r = Campaign(e, "lossy", &metrics);
  const DetectorCoverage* d = KvDetector(r);
  ASSERT_NE(d, nullptr) << Explain(r);
  EXPECT_EQ(d->state, DetectorState::kInconclusive) << Explain(r);
  EXPECT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  const std::string m = metrics.Serialize();
  EXPECT_GT(Sample(m, Messages("missing")), 0) << m;
  EXPECT_EQ(Sample(m, Messages("missing")),
            r.ToJson()["kv_events"]["stream"]["missing_messages"].get<double>())
      << m;
}

TEST(CampaignKvEventsTest, ASharedCacheIsAKvEventsFindingAmidTheLoad) {
  Engine e(/*shared=*/true);
  AuditorMetrics metrics;
  const CampaignResult r = Campaign(e, "shared", &metrics);
  int kv = 0;
  for (const Finding& f : r.findings) {
    kv += f.detector == "kv_events" && f.kind == "cross_tenant_kv_block_hit";
  }
  EXPECT_EQ(kv, 3) << Explain(r);
  EXPECT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
}

// --test-break=kv_events: the detector finds nothing, so its positive
// control (a canned pair through the real subscriber and ledger) fails,
// and the verdict is never clean however isolated the cache is.
TEST(CampaignKvEventsTest,
     ABrokenKvEventsDetectorFailsItsControlAndIsNotClean) {
  Engine e(/*shared=*/false);
  AuditorMetrics metrics;
  const CampaignResult r =
      Campaign(e, "broken", &metrics, [](CampaignOptions* o) {
        o->broken = {"kv_events"};
        o->required = {"kv_events"};
      });
  ASSERT_TRUE(r.positive_controls.count("kv_events")) << Explain(r);
  EXPECT_FALSE(r.positive_controls.at("kv_events"));
  const DetectorCoverage* d = KvDetector(r);
  ASSERT_NE(d, nullptr) << Explain(r);
  EXPECT_EQ(d->state, DetectorState::kInconclusive);
  EXPECT_NE(d->reason.find("positive control failed"), std::string::npos)
      << d->reason;
  EXPECT_NE(r.verdict, Verdict::kClean) << Explain(r);
}

// --floor kv_events=5 with the stream's default of 3 pairs: five pairs are
// run, and five judged are the floor.
TEST(CampaignKvEventsTest, ItsFloorRunsAtLeastThatManyPairs) {
  Engine e(/*shared=*/false);
  AuditorMetrics metrics;
  const CampaignResult r =
      Campaign(e, "floor", &metrics,
               [](CampaignOptions* o) { o->floors["kv_events"] = 5; });
  const DetectorCoverage* d = KvDetector(r);
  ASSERT_NE(d, nullptr) << Explain(r);
  EXPECT_EQ(d->floor, 5);
  EXPECT_EQ(d->state, DetectorState::kActive) << d->reason;
  EXPECT_EQ(r.ToJson()["kv_events"]["isolated_pairs"], 5);
  EXPECT_EQ(r.verdict, Verdict::kClean) << Explain(r);
}

}  // namespace
}  // namespace kvcanary::auditor
