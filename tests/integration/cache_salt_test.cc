// A request body's cache_salt under each --cache-salt mode, and the
// router's gateway mode (--tenant-header), on the real cluster: whose
// cached pages a request reaches, seen in usage's cached_tokens and in the
// watermark check's violations (--watermark=detect).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

constexpr int kPageTokens = 16;  // up's default

const std::string& Prompt() {
  static const std::string* p = new std::string(LongPrompt(30));
  return *p;
}

std::string Body(const std::string& salt) {
  nlohmann::json j = nlohmann::json::parse(Completion(Prompt(), 4));
  if (!salt.empty()) j["cache_salt"] = salt;
  return j.dump();
}

// POSTs a completion with `salt` ("" none) and extra header fields.
HttpResult Send(
    const Cluster& c, const std::string& key, const std::string& salt,
    const std::vector<std::pair<std::string, std::string>>& fields = {}) {
  httplib::Client client(c.router());
  client.set_read_timeout(120, 0);
  httplib::Headers headers{{"Authorization", "Bearer " + key}};
  for (const auto& [name, value] : fields) headers.emplace(name, value);
  auto res =
      client.Post("/v1/completions", headers, Body(salt), "application/json");
  HttpResult r;
  if (!res) return r;
  r.status = res->status;
  r.body = res->body;
  r.json = nlohmann::json::parse(r.body, nullptr, false);
  return r;
}

int CachedTokens(const HttpResult& r) {
  if (r.status != 200) return -1;
  return r.json["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
}

int Cacheable(const HttpResult& r) {
  const int prompt_tokens = r.json["usage"]["prompt_tokens"].get<int>();
  return (prompt_tokens - 1) / kPageTokens * kPageTokens;
}

// Foreign reads of pages tenant 1 (acme, the file's first) wrote; 0 when
// the series is absent (MetricValue's -1: none recorded yet).
double ForeignReadsOfAcme(const Cluster& c) {
  const std::string metrics = Get(c.prefill(), "/metrics").body;
  return std::max(
      0.0, MetricValue(metrics, "kvcanary_node_watermark_violations_total",
                       "kind=\"foreign_tenant_read\",writer_tenant=\"1\""));
}

TEST(CacheSaltTest, ScopedSaltPartitionsATenantsOwnCacheOnly) {
  Cluster cluster({"--cache-salt=scoped", "--watermark=detect"});
  ASSERT_TRUE(cluster.ok());
  HttpResult first = Send(cluster, "sk-acme", "alpha");
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(CachedTokens(first), 0);
  // Same tenant, same salt: a hit (the positive control).
  EXPECT_EQ(CachedTokens(Send(cluster, "sk-acme", "alpha")), Cacheable(first));
  // Same tenant, another salt or none: its own partition, a miss.
  EXPECT_EQ(CachedTokens(Send(cluster, "sk-acme", "beta")), 0);
  EXPECT_EQ(CachedTokens(Send(cluster, "sk-acme", "")), 0);
  // Another tenant sending acme's salt stays in its own space.
  EXPECT_EQ(CachedTokens(Send(cluster, "sk-globex", "alpha")), 0);
  EXPECT_EQ(ForeignReadsOfAcme(cluster), 0);
}

TEST(CacheSaltTest, ClientSaltIsForgeableAndDetectFlagsTheForeignRead) {
  Cluster cluster({"--cache-salt=client", "--watermark=detect"});
  ASSERT_TRUE(cluster.ok());
  HttpResult first = Send(cluster, "sk-acme", "alpha");
  ASSERT_EQ(first.status, 200) << first.body;
  // globex sends acme's salt: served acme's pages, as vLLM would.
  HttpResult forged = Send(cluster, "sk-globex", "alpha");
  ASSERT_EQ(forged.status, 200) << forged.body;
  EXPECT_EQ(CachedTokens(forged), Cacheable(first));
  // The pages kept acme's stamp.
  EXPECT_GT(ForeignReadsOfAcme(cluster), 0);
  // Without a salt, globex's keys are its own again.
  EXPECT_EQ(CachedTokens(Send(cluster, "sk-globex", "")), 0);
}

TEST(CacheSaltTest, IgnoredSaltChangesNothing) {
  Cluster cluster({});  // --cache-salt=ignore
  ASSERT_TRUE(cluster.ok());
  HttpResult first = Send(cluster, "sk-acme", "alpha");
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(CachedTokens(Send(cluster, "sk-acme", "beta")), Cacheable(first));
  EXPECT_EQ(CachedTokens(Send(cluster, "sk-globex", "alpha")), 0);
}

TEST(CacheSaltTest, AnInvalidSaltIsA400) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  HttpResult empty = Send(cluster, "sk-acme", "");
  ASSERT_EQ(empty.status, 200);
  nlohmann::json j = nlohmann::json::parse(Body(""));
  for (const nlohmann::json& bad :
       {nlohmann::json(""), nlohmann::json(7), nlohmann::json("a\nb"),
        nlohmann::json(std::string(257, 'x'))}) {
    j["cache_salt"] = bad;
    HttpResult r =
        Post(cluster.router(), "/v1/completions", j.dump(), "sk-acme");
    EXPECT_EQ(r.status, 400) << bad.dump();
    EXPECT_EQ(r.json["error"]["param"], "cache_salt") << r.body;
  }
}

constexpr char kGatewayTenants[] = R"({"tenants": [
  {"id": "acme", "api_keys": ["sk-acme"]},
  {"id": "globex", "api_keys": ["sk-globex"]},
  {"id": "edge", "api_keys": ["sk-edge"], "gateway": true}]})";

TEST(CacheSaltTest, AGatewaysHeaderNamesTheTenantForItsCacheAndStamps) {
  Cluster cluster({"--tenant-header=X-Tenant-Id", "--watermark=detect"},
                  kGatewayTenants);
  ASSERT_TRUE(cluster.ok());
  HttpResult first = Send(cluster, "sk-acme", "");
  ASSERT_EQ(first.status, 200) << first.body;
  // Through the gateway for acme: acme's own pages.
  EXPECT_EQ(
      CachedTokens(Send(cluster, "sk-edge", "", {{"X-Tenant-Id", "acme"}})),
      Cacheable(first));
  // For globex: globex's own space, a miss.
  EXPECT_EQ(
      CachedTokens(Send(cluster, "sk-edge", "", {{"x-tenant-id", "globex"}})),
      0);
  EXPECT_EQ(ForeignReadsOfAcme(cluster), 0);
  // A tenant's own key cannot name another tenant: the header is ignored.
  EXPECT_EQ(
      CachedTokens(Send(cluster, "sk-globex", "", {{"X-Tenant-Id", "acme"}})),
      Cacheable(first));  // globex's earlier request cached its own pages
  EXPECT_EQ(ForeignReadsOfAcme(cluster), 0);
}

TEST(CacheSaltTest, AGatewayRequestMustNameExactlyOneKnownTenant) {
  Cluster cluster({"--tenant-header=X-Tenant-Id"}, kGatewayTenants);
  ASSERT_TRUE(cluster.ok());
  EXPECT_EQ(Send(cluster, "sk-edge", "").status, 400);
  EXPECT_EQ(Send(cluster, "sk-edge", "",
                 {{"X-Tenant-Id", "acme"}, {"X-Tenant-Id", "globex"}})
                .status,
            400);
  EXPECT_EQ(Send(cluster, "sk-edge", "", {{"X-Tenant-Id", "nobody"}}).status,
            403);
  EXPECT_EQ(Send(cluster, "sk-edge", "", {{"X-Tenant-Id", "edge"}}).status,
            403);
  EXPECT_EQ(Send(cluster, "sk-edge", "", {{"X-Tenant-Id", "acme"}}).status,
            200);
}

TEST(CacheSaltTest, ABodySaltDoesNotOverrideTheGatewaysHeaderUnlessClient) {
  const std::vector<std::pair<std::string, std::string>> for_acme = {
      {"X-Tenant-Id", "acme"}};
  const std::vector<std::pair<std::string, std::string>> for_globex = {
      {"X-Tenant-Id", "globex"}};
  {
    Cluster scoped({"--tenant-header=X-Tenant-Id", "--cache-salt=scoped",
                    "--watermark=detect"},
                   kGatewayTenants);
    ASSERT_TRUE(scoped.ok());
    ASSERT_EQ(Send(scoped, "sk-edge", "alpha", for_acme).status, 200);
    EXPECT_EQ(CachedTokens(Send(scoped, "sk-edge", "alpha", for_globex)), 0);
    EXPECT_EQ(ForeignReadsOfAcme(scoped), 0);
  }
  Cluster client({"--tenant-header=X-Tenant-Id", "--cache-salt=client",
                  "--watermark=detect"},
                 kGatewayTenants);
  ASSERT_TRUE(client.ok());
  HttpResult first = Send(client, "sk-edge", "alpha", for_acme);
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(CachedTokens(Send(client, "sk-edge", "alpha", for_globex)),
            Cacheable(first));
  EXPECT_GT(ForeignReadsOfAcme(client), 0);
}

TEST(CacheSaltTest, VersionSaysWhichModesAreOn) {
  Cluster cluster({"--tenant-header=X-Tenant-Id", "--cache-salt=scoped"},
                  kGatewayTenants);
  ASSERT_TRUE(cluster.ok());
  HttpResult v = Get(cluster.router(), "/version", "sk-acme");
  ASSERT_EQ(v.status, 200) << v.body;
  EXPECT_EQ(v.json["cache_salt"], "scoped");
  EXPECT_EQ(v.json["tenant_header"], "X-Tenant-Id");
  EXPECT_EQ(v.json["host_tier_pages"], 0);
}

}  // namespace
}  // namespace kvcanary::testing
