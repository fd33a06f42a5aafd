// usage.prompt_tokens_details.cached_tokens from the real cluster, under
// each --prefix-cache mode: the count comes from the prefill node that
// served the prompt's pages from its cache, and in global mode another
// tenant's identical prompt hits the first tenant's pages.
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

constexpr int kPageTokens = 16;  // up's default

// Several full pages, then a partial one.
const std::string& Prompt() {
  static const std::string* p = new std::string(LongPrompt(30));
  return *p;
}

// What a cache hit serves of an answer's prompt: its full pages, all but
// the last token (which is always computed, for its logits).
int Cacheable(const HttpResult& r) {
  const int prompt_tokens = r.json["usage"]["prompt_tokens"].get<int>();
  return (prompt_tokens - 1) / kPageTokens * kPageTokens;
}

// The cached tokens of a completion answer; -1 if it has none or failed.
int CachedTokens(const HttpResult& r) {
  if (r.status != 200) return -1;
  const auto& usage = r.json["usage"];
  if (!usage.contains("prompt_tokens_details")) return -1;
  return usage["prompt_tokens_details"]["cached_tokens"].get<int>();
}

HttpResult Send(const Cluster& c, const std::string& key) {
  return Post(c.router(), "/v1/completions", Completion(Prompt(), 4), key);
}

double PrefillHitPages(const Cluster& c) {
  return MetricValue(Get(c.prefill(), "/metrics").body,
                     "kvcanary_node_prefix_cache_hit_pages_total", "prefill");
}

TEST(CachedTokensTest, TenantModeHitsTheSameTenantsRepeatOnly) {
  Cluster cluster({"--prefix-cache=tenant"});
  ASSERT_TRUE(cluster.ok());
  HttpResult first = Send(cluster, "sk-acme");
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(CachedTokens(first), 0);
  const int cacheable = Cacheable(first);
  ASSERT_GT(cacheable, 0);
  HttpResult again = Send(cluster, "sk-acme");
  EXPECT_EQ(CachedTokens(again), cacheable) << again.body;
  HttpResult other = Send(cluster, "sk-globex");
  EXPECT_EQ(CachedTokens(other), 0) << other.body;
  // acme's repeat only.
  EXPECT_EQ(PrefillHitPages(cluster), cacheable / kPageTokens);
}

TEST(CachedTokensTest, GlobalModeServesAnotherTenantsPagesAndDetectFlagsIt) {
  Cluster cluster({"--prefix-cache=global", "--watermark=detect"});
  ASSERT_TRUE(cluster.ok());
  HttpResult first = Send(cluster, "sk-acme");
  ASSERT_EQ(CachedTokens(first), 0);
  HttpResult other = Send(cluster, "sk-globex");
  ASSERT_EQ(other.status, 200) << other.body;
  EXPECT_EQ(CachedTokens(other), Cacheable(first));
  EXPECT_EQ(PrefillHitPages(cluster), Cacheable(first) / kPageTokens);
  // The pages kept acme's stamp: globex's read of them is flagged.
  EXPECT_GT(MetricValue(Get(cluster.prefill(), "/metrics").body,
                        "kvcanary_node_watermark_violations_total",
                        "kind=\"foreign_tenant_read\",writer_tenant=\"1\""),
            0);
}

TEST(CachedTokensTest, GlobalModeCrossTenantHitIsRefusedInEnforce) {
  Cluster cluster({"--prefix-cache=global"});  // watermark enforce
  ASSERT_TRUE(cluster.ok());
  HttpResult first = Send(cluster, "sk-acme");
  ASSERT_EQ(first.status, 200);
  HttpResult other = Send(cluster, "sk-globex");
  EXPECT_EQ(other.status, 502) << other.body;
  EXPECT_FALSE(other.json.contains("choices"));
  // Its own repeat is fine.
  EXPECT_EQ(CachedTokens(Send(cluster, "sk-acme")), Cacheable(first));
}

TEST(CachedTokensTest, OffModeNeverReportsCachedTokens) {
  Cluster cluster({"--prefix-cache=off"});
  ASSERT_TRUE(cluster.ok());
  EXPECT_EQ(CachedTokens(Send(cluster, "sk-acme")), 0);
  EXPECT_EQ(CachedTokens(Send(cluster, "sk-acme")), 0);
  EXPECT_EQ(PrefillHitPages(cluster), 0);
}

TEST(CachedTokensTest, StreamsReportThemInTheFinalChunksUsage) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  HttpResult first = Send(cluster, "sk-initech");
  ASSERT_EQ(first.status, 200);
  nlohmann::json body;
  body["messages"] = {{{"role", "user"}, {"content", Prompt()}}};
  body["max_tokens"] = 4;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  // Chat renders the content alone: the same tokens as the completion.
  HttpResult r =
      Post(cluster.router(), "/v1/chat/completions", body.dump(), "sk-initech");
  ASSERT_EQ(r.status, 200) << r.body;
  std::istringstream lines(r.body);
  nlohmann::json last;
  int with_usage = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: {", 0) != 0) continue;
    last = nlohmann::json::parse(line.substr(6));
    with_usage += last.contains("usage");
  }
  EXPECT_EQ(with_usage, 1);
  ASSERT_TRUE(last.contains("usage")) << r.body;
  EXPECT_EQ(last["usage"]["prompt_tokens"],
            first.json["usage"]["prompt_tokens"]);
  EXPECT_EQ(last["usage"]["prompt_tokens_details"]["cached_tokens"],
            Cacheable(first));
}

}  // namespace
}  // namespace kvcanary::testing
