// The host tier on the real cluster (--host_tier_pages): a prompt whose
// prefix pages the prefill node's small pool evicted is served again from
// the tier (cached_tokens, the spill and promotion metrics); with
// tier-drops-salt another tenant's identical prompt promotes the first
// tenant's pages, and the watermark check names both tenants (detect) or
// refuses the request (enforce).
#include <string>
#include <vector>

#include "common/page_stamp.h"
#include "common/trace_event.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

constexpr int kPageTokens = 16;  // up's default

// Prompts of several full pages each, none a prefix of another.
std::string TierPrompt(const std::string& word) {
  std::string p = word;
  for (int i = 0; i < 40; ++i) p += i % 2 ? " " + word : " and";
  return p;
}

int CachedTokens(const HttpResult& r) {
  if (r.status != 200) return -1;
  return r.json["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
}

int Cacheable(const HttpResult& r) {
  const int prompt_tokens = r.json["usage"]["prompt_tokens"].get<int>();
  return (prompt_tokens - 1) / kPageTokens * kPageTokens;
}

HttpResult Send(const Cluster& c, const std::string& prompt,
                const std::string& key) {
  return Post(c.router(), "/v1/completions", Completion(prompt, 4), key);
}

// acme's first prompt, then three others that push its pages out of the
// prefill node's 8-page pool into the tier. Returns the first answer.
HttpResult FillAndSpill(const Cluster& c) {
  HttpResult first = Send(c, TierPrompt("cat"), "sk-acme");
  EXPECT_EQ(first.status, 200) << first.body;
  for (const char* word : {"dog", "sun", "tree"}) {
    EXPECT_EQ(Send(c, TierPrompt(word), "sk-acme").status, 200);
  }
  return first;
}

TEST(HostTierTest, VersionStatesBothTiers) {
  Cluster cluster({"--num_pages=8", "--host_tier_pages=32"});
  ASSERT_TRUE(cluster.ok());
  const HttpResult v = Get(cluster.router(), "/version", "sk-acme");
  ASSERT_EQ(v.status, 200) << v.body;
  // The first tier is the prefill node's pool: 8 pages of 16 tokens.
  EXPECT_EQ(v.json["kv_cache_tokens"], 8 * kPageTokens) << v.body;
  EXPECT_EQ(v.json["host_tier_pages"], 32) << v.body;
}

TEST(HostTierTest, AnEvictedPromptIsServedAgainFromTheTier) {
  Cluster cluster({"--num_pages=8", "--host_tier_pages=32"});
  ASSERT_TRUE(cluster.ok());
  const HttpResult first = FillAndSpill(cluster);
  ASSERT_EQ(CachedTokens(first), 0);
  ASSERT_GE(Cacheable(first), 2 * kPageTokens);
  EXPECT_GT(
      PrefillMetric(cluster, "kvcanary_node_prefix_cache_spilled_pages_total"),
      0);
  const HttpResult again = Send(cluster, TierPrompt("cat"), "sk-acme");
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(CachedTokens(again), Cacheable(first));
  EXPECT_EQ(again.json["choices"][0]["text"], first.json["choices"][0]["text"]);
  EXPECT_GT(
      PrefillMetric(cluster, "kvcanary_node_prefix_cache_promoted_pages_total"),
      0);
  EXPECT_GT(
      PrefillMetric(cluster, "kvcanary_node_prefix_cache_tier_hit_pages_total"),
      0);
  EXPECT_GT(PrefillMetric(cluster, "kvcanary_node_prefix_cache_tier_pages"), 0);
  // Another tenant's identical prompt: the salt keeps it out of the tier.
  EXPECT_EQ(CachedTokens(Send(cluster, TierPrompt("cat"), "sk-globex")), 0);
  // No violation counted: the family has no series (-1) or 0.
  EXPECT_LE(PrefillMetric(cluster, "kvcanary_node_watermark_violations_total",
                          "kind="),
            0);
}

TEST(HostTierTest, TierDropsSaltIsAForeignReadNamingBothTenants) {
  Cluster cluster({"--num_pages=8", "--host_tier_pages=32",
                   "--fault=tier-drops-salt", "--watermark=detect"});
  ASSERT_TRUE(cluster.ok());
  const HttpResult first = FillAndSpill(cluster);
  ASSERT_EQ(first.status, 200);
  TraceTap tap(cluster.prefill(), cluster.trace_token());
  const HttpResult other = Send(cluster, TierPrompt("cat"), "sk-globex");
  const auto events = tap.Stop();
  ASSERT_EQ(other.status, 200) << other.body;  // detect serves it
  EXPECT_EQ(CachedTokens(other), Cacheable(first));
  int foreign = 0;
  for (const TraceEvent& e : events) {
    if (e.type != TraceEventType::kViolation ||
        e.kind != ViolationKind::kForeignTenantRead) {
      continue;
    }
    ++foreign;
    EXPECT_EQ(e.reader.tenant, TenantId(2));  // globex read...
    EXPECT_EQ(e.writer.tenant, TenantId(1));  // ...acme's promoted bytes
    EXPECT_TRUE(e.writer_shared);
  }
  EXPECT_GT(foreign, 0);
  EXPECT_GT(PrefillMetric(cluster, "kvcanary_node_watermark_violations_total",
                          "kind=\"foreign_tenant_read\",writer_tenant=\"1\""),
            0);
}

TEST(HostTierTest, TierDropsSaltIsRefusedUnderEnforce) {
  Cluster cluster({"--num_pages=8", "--host_tier_pages=32",
                   "--fault=tier-drops-salt"});  // watermark enforce
  ASSERT_TRUE(cluster.ok());
  ASSERT_EQ(FillAndSpill(cluster).status, 200);
  const HttpResult other = Send(cluster, TierPrompt("cat"), "sk-globex");
  EXPECT_EQ(other.status, 502) << other.body;
  EXPECT_FALSE(other.json.contains("choices"));
  // acme's own repeat is served from the tier as before.
  const HttpResult again = Send(cluster, TierPrompt("cat"), "sk-acme");
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_GT(CachedTokens(again), 0);
}

}  // namespace
}  // namespace kvcanary::testing
