// GET /version on the real router: what the engine is and the settings its
// nodes actually run with, behind a tenant's key; and the Server header.
#include "engine/nodes/version.h"

#include <string>

#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

const std::string kServer =
    std::string(engine::kEngineName) + "/" + engine::kEngineVersion;

// GET with the response headers (cluster.h's Get drops them).
httplib::Result GetWithHeaders(const std::string& base, const std::string& path,
                               const std::string& api_key = "") {
  httplib::Client client(base);
  httplib::Headers headers;
  if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);
  return client.Get(path.c_str(), headers);
}

class VersionTest : public SharedClusterTest {};

TEST_F(VersionTest, NeedsATenantsKey) {
  EXPECT_EQ(Get(cluster_->router(), "/version").status, 401);
  HttpResult bad = Get(cluster_->router(), "/version", "sk-nope");
  EXPECT_EQ(bad.status, 401);
  EXPECT_EQ(bad.json["error"]["type"], "authentication_error");
}

TEST_F(VersionTest, StatesTheDefaultsTheNodesRunWith) {
  HttpResult r = Get(cluster_->router(), "/version", "sk-acme");
  ASSERT_EQ(r.status, 200) << r.body;
  const nlohmann::json want = {{"engine", "kvcanary"},
                               {"version", engine::kEngineVersion},
                               {"disaggregated", true},
                               {"kv_checksum", "crc32c"},
                               {"watermark", "enforce"},
                               {"prefix_cache", "tenant"},
                               {"trace_format", "kvt2"},
                               {"max_model_len", 512},
                               {"max_prompt_tokens", 256},
                               {"page_tokens", 16},
                               {"host_tier_pages", 0},
                               {"tenant_header", nullptr},
                               {"free_list", "lifo"},
                               {"cache_salt", "ignore"},
                               {"numerics", "invariant"},
                               {"kv_cache_tokens", r.json["kv_cache_tokens"]}};
  EXPECT_EQ(r.json, want);
  // The first tier, the prefill node's page pool, in whole pages.
  ASSERT_TRUE(r.json["kv_cache_tokens"].is_number_integer()) << r.body;
  EXPECT_GT(r.json["kv_cache_tokens"].get<int>(), 0);
  EXPECT_EQ(r.json["kv_cache_tokens"].get<int>() % 16, 0);
  // The limits agree with what /v1/models advertises.
  HttpResult models = Get(cluster_->router(), "/v1/models", "sk-acme");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.json["data"][0]["max_model_len"], r.json["max_model_len"]);
  EXPECT_EQ(models.json["data"][0]["max_prompt_tokens"],
            r.json["max_prompt_tokens"]);
}

TEST_F(VersionTest, NodesHandOutFreePagesLifoByDefault) {
  HttpResult r = Get(cluster_->decode(), "/internal/v1/limits",
                     cluster_->internal_secret());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["free_list"], "lifo");
}

TEST_F(VersionTest, EveryRouterAnswerNamesTheServer) {
  for (const auto& [path, key] :
       std::vector<std::pair<std::string, std::string>>{
           {"/version", "sk-acme"},
           {"/version", ""},
           {"/health", ""},
           {"/v1/models", "sk-globex"}}) {
    auto res = GetWithHeaders(cluster_->router(), path, key);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->get_header_value("Server"), kServer) << path;
  }
  httplib::Client client(cluster_->router());
  auto completion =
      client.Post("/v1/completions", {{"Authorization", "Bearer sk-acme"}},
                  Completion("a cat", 2), "application/json");
  ASSERT_TRUE(completion);
  EXPECT_EQ(completion->status, 200);
  EXPECT_EQ(completion->get_header_value("Server"), kServer);
}

TEST(VersionFlagsTest, StatesTheNodeFlagsPassedToUp) {
  Cluster cluster({"--watermark=detect", "--prefix-cache=global",
                   "--page-tokens=32", "--max-prompt-tokens=200"});
  ASSERT_TRUE(cluster.ok());
  HttpResult r = Get(cluster.router(), "/version", "sk-umbrella");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["watermark"], "detect");
  EXPECT_EQ(r.json["prefix_cache"], "global");
  EXPECT_EQ(r.json["page_tokens"], 32);
  EXPECT_EQ(r.json["max_prompt_tokens"], 200);
  EXPECT_EQ(r.json["max_model_len"], 512);
}

TEST(VersionFlagsTest, BothNodesRunWithTheFreeListAndNumericsGivenToUp) {
  Cluster cluster({"--free-list=fifo", "--numerics=variant"});
  ASSERT_TRUE(cluster.ok());
  for (const std::string& node : {cluster.prefill(), cluster.decode()}) {
    HttpResult r = Get(node, "/internal/v1/limits", cluster.internal_secret());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json["free_list"], "fifo") << node;
    EXPECT_EQ(r.json["numerics"], "variant") << node;
  }
  EXPECT_EQ(Get(cluster.router(), "/version", "sk-acme").json["numerics"],
            "variant");
  // And a completion is served with it.
  EXPECT_EQ(Post(cluster.router(), "/v1/completions", Completion("a cat", 4),
                 "sk-acme")
                .status,
            200);
}

TEST(VersionFlagsTest, OldBooleanPrefixCacheSpellingsStillWork) {
  Cluster cluster({"--watermark=off", "--prefix-cache=false"});
  ASSERT_TRUE(cluster.ok());
  HttpResult r = Get(cluster.router(), "/version", "sk-acme");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["watermark"], "off");
  EXPECT_EQ(r.json["prefix_cache"], "off");
}

}  // namespace
}  // namespace kvcanary::testing
