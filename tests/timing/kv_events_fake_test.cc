// cache-audit --kv-events against a scripted vLLM (tests/auditor/
// fake_target.h) whose prompt cache publishes its block events on a real
// ZMQ stream (tests/auditor/fakes/fake_kv_publisher.h): a cache shared by every
// key is a kv_events finding with hashes and sequence numbers, one salted
// per key is clean with the block pairs it checked, an engine that reports
// hits as stores is shared only with a hit signal, event hashes that ignore
// the salt are not called sharing, and lost messages or a publisher restart
// make the detector inconclusive, as does a probe served by a replica whose
// stream is not followed. Label `timing` (cache-audit's rounds).
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>

#include "auditor/audits/cache_audit/cache_audit.h"
#include "auditor/reports/result_text.h"
#include "gtest/gtest.h"
#include "tests/auditor/fakes/fake_kv_publisher.h"
#include "tests/auditor/fakes/fake_target.h"

namespace kvcanary::auditor {
namespace {

using testing::EncodeBatch;
using testing::FakeEvent;
using testing::FakeKvPublisher;
using testing::FakeTarget;
using testing::FakeTargetOptions;
using testing::Flavor;

constexpr int kBlock = 4;

// What the stream does to the events the fake's cache makes.
struct StreamScript {
  bool drop_odd = false;  // every other message not sent...
  bool forget = false;    // ...nor kept for replay
  int restart_at = 0;     // > 0: the publisher restarts before message n
  std::atomic<int> published{0};
};

class KvEventsFakeTest : public ::testing::Test {
 protected:
  void Start(FakeTargetOptions fo, bool replay = true) {
    publisher_ = std::make_unique<FakeKvPublisher>(replay);
    fo.flavor = Flavor::kVllm;
    fo.limit_tokens = 160;
    fo.base_ms = 1;
    fo.prefill_us_per_token = 100;
    fo.cache_block_tokens = kBlock;
    fo.api_keys = {{"sk-a", "acme"}, {"sk-g", "globex"}};
    fo.on_blocks_stored =
        [this](const std::vector<FakeTargetOptions::StoredBlock>& blocks) {
          const FakeEvent e = testing::StoredEvent(blocks, kBlock);
          const int n = ++script_.published;
          if (script_.restart_at > 0 && n == script_.restart_at) {
            publisher_->Restart();
          }
          const bool drop = script_.drop_odd && n % 2 == 1;
          publisher_->Publish(EncodeBatch({e}), drop, drop && script_.forget);
        };
    target_ = std::make_unique<FakeTarget>(fo);
  }

  // max_samples: cache-audit's timing arms (its default unless > 0).
  CampaignResult Audit(const std::string& name, int max_samples = 0) {
    CacheAuditOptions o;
    if (max_samples > 0) o.max_samples = max_samples;
    o.target.target = target_->url();
    o.target.tenants = {{"acme", "sk-a"}, {"globex", "sk-g"}};
    o.db_path = ::testing::TempDir() + "/kvcanary-kv-events-" +
                std::to_string(getpid()) + "-" + name + ".db";
    o.progress = false;
    o.seed = 1;
    o.kv_events = *kv_events::ParseKvEventsFlag(publisher_->flag());
    AuditorMetrics metrics;
    return RunCacheAudit(o, &metrics);
  }

  StreamScript script_;
  std::unique_ptr<FakeKvPublisher> publisher_;
  std::unique_ptr<FakeTarget> target_;
};

const DetectorCoverage& KvDetector(const CampaignResult& r) {
  for (const DetectorCoverage& d : r.detectors) {
    if (d.name == "kv_events") return d;
  }
  static const DetectorCoverage none;
  ADD_FAILURE() << "no kv_events detector";
  return none;
}

// What the auditor would print, for failure messages.
std::string Explain(const CampaignResult& r) {
  return ResultText(r, 20) + r.details.dump(2);
}

int KvFindings(const CampaignResult& r) {
  int n = 0;
  for (const Finding& f : r.findings) {
    if (f.detector != "kv_events") continue;
    EXPECT_EQ(f.kind, "cross_tenant_kv_block_hit");
    EXPECT_EQ(f.writer, "acme");
    EXPECT_EQ(f.reader, "globex");
    EXPECT_GT(
        f.detail["not_stored"].get<int>() + f.detail["same_hash"].get<int>(),
        0);
    EXPECT_FALSE(f.detail["block_checks"].empty());
    EXPECT_GE(f.detail["last_seq"].get<int64_t>(),
              f.detail["first_seq"].get<int64_t>());
    ++n;
  }
  return n;
}

TEST_F(KvEventsFakeTest, ACacheSharedByEveryKeyIsAKvEventsFinding) {
  FakeTargetOptions fo;
  fo.shared_prompt_cache = true;
  Start(fo);
  const CampaignResult r = Audit("shared");
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(KvFindings(r), 3) << Explain(r);
  EXPECT_EQ(r.details["kv_events"]["shared_pairs"], 3);
  const nlohmann::json& block =
      r.details["kv_events"]["pairs"][0]["block_checks"][0];
  EXPECT_EQ(block["outcome"], "not_stored");
  EXPECT_TRUE(block["b_hash"].is_null());
}

TEST_F(KvEventsFakeTest, ACacheSaltedPerKeyIsCleanWithTheBlockPairsChecked) {
  FakeTargetOptions fo;
  fo.per_key_prompt_cache = true;
  fo.report_cached_tokens = true;
  Start(fo);
  const CampaignResult r = Audit("per-key");
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  const DetectorCoverage& d = KvDetector(r);
  EXPECT_EQ(d.state, DetectorState::kActive) << d.reason;
  EXPECT_GT(d.stats["block_pairs_checked"].get<int>(), 3 * 4);
  EXPECT_EQ(r.details["kv_events"]["isolated_pairs"], 3);
}

TEST_F(KvEventsFakeTest, HitsReportedAsStoresAreSharedWithCachedTokens) {
  FakeTargetOptions fo;
  fo.shared_prompt_cache = true;
  fo.events_report_hits = true;
  fo.report_cached_tokens = true;
  Start(fo);
  const CampaignResult r = Audit("report-hits");
  EXPECT_EQ(KvFindings(r), 3) << Explain(r);
  EXPECT_EQ(r.details["kv_events"]["pairs"][0]["block_checks"][0]["outcome"],
            "same_hash");
}

// Over chat through a template: the header every request of a key shares
// is stored under each key's own hashes (and, reporting hits, reported
// again), and A's plant ends in the template's closing markers, blocks
// B's prompt (P, then its witness) never holds: those are dropped
// (tail_blocks), and the pairs are decided on the plant's own blocks,
// isolated or shared as over text completions.
TEST_F(KvEventsFakeTest, OverChatATemplateHeaderInEveryRequestIsNotSharing) {
  FakeTargetOptions fo;
  fo.per_key_prompt_cache = true;
  fo.report_cached_tokens = true;
  fo.events_report_hits = true;
  Start(testing::ChatOnly(fo));
  const CampaignResult r = Audit("chat-per-key");
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.api, "chat");
  EXPECT_EQ(r.details["kv_events"]["isolated_pairs"], 3) << Explain(r);
}

TEST_F(KvEventsFakeTest, OverChatACacheSharedByEveryKeyIsAFinding) {
  FakeTargetOptions fo;
  fo.shared_prompt_cache = true;
  Start(testing::ChatOnly(fo));
  const CampaignResult r = Audit("chat-shared");
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(KvFindings(r), 3) << Explain(r);
}

TEST_F(KvEventsFakeTest, ReportFullAsksTheEngineToReportHitsPerRequest) {
  // The fake reports hits only for requests that ask (vLLM's per-request
  // kv_cache_report_mode): with report=full, B's hits come back as stores
  // under A's hashes, and its cached tokens agree.
  FakeTargetOptions fo;
  fo.shared_prompt_cache = true;
  fo.report_cached_tokens = true;
  Start(fo);
  const std::string flag = publisher_->flag() + ",report=full";
  CacheAuditOptions o;
  o.target.target = target_->url();
  o.target.tenants = {{"acme", "sk-a"}, {"globex", "sk-g"}};
  o.db_path = ::testing::TempDir() + "/kvcanary-kv-events-" +
              std::to_string(getpid()) + "-report-full.db";
  o.progress = false;
  o.seed = 1;
  o.kv_events = *kv_events::ParseKvEventsFlag(flag);
  ASSERT_TRUE(o.kv_events.report_full);
  AuditorMetrics metrics;
  const CampaignResult r = RunCacheAudit(o, &metrics);
  EXPECT_EQ(KvFindings(r), 3) << Explain(r);
  EXPECT_EQ(r.details["kv_events"]["pairs"][0]["block_checks"][0]["outcome"],
            "same_hash");
  EXPECT_EQ(r.details["kv_events"]["notes"].size(), 1u);
}

TEST_F(KvEventsFakeTest, HashesThatIgnoreTheSaltAreNotCalledSharing) {
  // The cache is isolated per key; only the events' hashes are unsalted.
  FakeTargetOptions fo;
  fo.per_key_prompt_cache = true;
  fo.events_ignore_salt = true;
  fo.report_cached_tokens = true;
  Start(fo);
  const CampaignResult r = Audit("unsalted");
  EXPECT_EQ(KvFindings(r), 0) << Explain(r);
  EXPECT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  const DetectorCoverage& d = KvDetector(r);
  EXPECT_EQ(d.state, DetectorState::kInconclusive);
  EXPECT_NE(d.reason.find("ignore the tenant"), std::string::npos) << d.reason;
}

TEST_F(KvEventsFakeTest, TwoReplicasWithOneStreamFollowedAreNeverCalledShared) {
  // Two replicas, caches salted per key, round-robin: A's plant and B's
  // probe always land on different replicas, and only replica 0's stream
  // is followed. Where B's probe went to replica 1 it stored nothing the
  // stream shows, which without its witness would read as a hit.
  FakeTargetOptions fo;
  fo.per_key_prompt_cache = true;
  fo.cache_replicas = 2;
  Start(fo);
  // (Half the timing samples hit: the timing arms need not run to 400.)
  const CampaignResult r = Audit("replicas", /*max_samples=*/40);
  EXPECT_EQ(KvFindings(r), 0) << Explain(r);
  const DetectorCoverage& d = KvDetector(r);
  EXPECT_EQ(d.state, DetectorState::kInconclusive);
  EXPECT_NE(d.reason.find("replica whose stream is not followed"),
            std::string::npos)
      << d.reason;
  EXPECT_NE(r.verdict, Verdict::kClean);
}

TEST_F(KvEventsFakeTest, LostMessagesMakeTheDetectorInconclusiveNotClean) {
  FakeTargetOptions fo;
  fo.shared_prompt_cache = true;
  script_.drop_odd = true;
  script_.forget = true;
  Start(fo);
  const CampaignResult r = Audit("lost");
  EXPECT_EQ(KvFindings(r), 0) << Explain(r);
  const DetectorCoverage& d = KvDetector(r);
  EXPECT_EQ(d.state, DetectorState::kInconclusive);
  EXPECT_NE(d.reason.find("lost"), std::string::npos) << d.reason;
  EXPECT_GT(d.stats["stream"]["missing_messages"].get<int>(), 0);
}

TEST_F(KvEventsFakeTest, DroppedMessagesTheReplaySocketResendsAreJudged) {
  FakeTargetOptions fo;
  fo.shared_prompt_cache = true;
  script_.drop_odd = true;  // dropped, but kept for replay
  Start(fo);
  const CampaignResult r = Audit("replayed");
  EXPECT_EQ(KvFindings(r), 3) << Explain(r);
  EXPECT_GT(KvDetector(r).stats["stream"]["replayed_messages"].get<int>(), 0);
}

TEST_F(KvEventsFakeTest, APublisherRestartIsNotReadAsIsolation) {
  FakeTargetOptions fo;
  fo.shared_prompt_cache = true;
  // Messages 1-3 are cache-audit's sizing requests; 4 the first pair's
  // plant; B's repeat stores nothing (a hit); the publisher restarts
  // before 5, the first pair's control.
  script_.restart_at = 5;
  Start(fo);
  const CampaignResult r = Audit("restart");
  const nlohmann::json& kv = r.details["kv_events"];
  EXPECT_EQ(kv["stream"]["restarts"], 1) << Explain(r);
  EXPECT_EQ(kv["pairs"][0]["verdict"], "inconclusive") << Explain(r);
  EXPECT_NE(kv["pairs"][0]["reason"].get<std::string>().find("restarted"),
            std::string::npos);
  // The pairs after it are judged again.
  EXPECT_EQ(kv["pairs"][1]["verdict"], "shared");
  EXPECT_EQ(KvFindings(r), 2);
  EXPECT_EQ(KvDetector(r).state, DetectorState::kInconclusive);
}

}  // namespace
}  // namespace kvcanary::auditor
