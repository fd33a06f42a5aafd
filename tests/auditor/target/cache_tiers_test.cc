// What a target states about its cache tiers, read from a real server on
// loopback, and what cache-audit makes of them (auditor/target/cache_tiers.h).
#include "auditor/target/cache_tiers.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/http_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

using ::testing::HasSubstr;

// A real server on loopback answering one info endpoint with `body` to
// the key "sk-a" only (401 otherwise, as kvcanary's /version and SGLang's
// /get_server_info with --api-key).
class InfoServer {
 public:
  InfoServer(const std::string& path, const std::string& body) {
    server_.Get(path, [body](const http::Request& req, http::Response& res) {
      if (req.get_header_value("Authorization") != "Bearer sk-a") {
        res.status = 401;
        return;
      }
      res.set_content(body, "application/json");
    });
    auto port = server_.Bind("127.0.0.1", 0);
    EXPECT_TRUE(port.ok()) << port.status();
    if (port.ok()) root_ = absl::StrCat("http://127.0.0.1:", *port);
    server_.Start();
  }
  ~InfoServer() { server_.Stop(); }

  CacheTiers Read(const std::string& key = "sk-a") const {
    return ReadCacheTiers(HttpClient(), root_, {"Authorization: Bearer " + key},
                          absl::Seconds(5));
  }

 private:
  http::Server server_;
  std::string root_;
};

TEST(CacheTiersTest, KvcanaryStatesItsPoolAndHostTier) {
  const InfoServer s("/version", R"({"engine": "kvcanary",
      "page_tokens": 16, "kv_cache_tokens": 1024, "host_tier_pages": 256})");
  const CacheTiers t = s.Read();
  EXPECT_EQ(t.first_tier_tokens, 1024);
  EXPECT_EQ(t.first_tier_where, "GET /version kv_cache_tokens");
  EXPECT_TRUE(t.second_tier);
  EXPECT_THAT(t.second_tier_where, HasSubstr("host_tier_pages 256"));
  EXPECT_EQ(t.DefaultEvictTokens(), 1280);
}

TEST(CacheTiersTest, KvcanaryWithoutAHostTierHasOneTier) {
  const InfoServer s("/version", R"({"engine": "kvcanary",
      "kv_cache_tokens": 1024, "host_tier_pages": 0})");
  const CacheTiers t = s.Read();
  EXPECT_FALSE(t.second_tier);
  EXPECT_EQ(t.DefaultEvictTokens(), 0);
  EXPECT_EQ(t.Unchecked(0), "");
}

TEST(CacheTiersTest, SglangStatesHiCacheAndItsDevicePool) {
  const InfoServer s("/get_server_info", R"({"model_path": "m",
      "enable_hierarchical_cache": true, "hicache_ratio": 2.0,
      "max_total_num_tokens": 20000})");
  const CacheTiers t = s.Read();
  EXPECT_EQ(t.first_tier_tokens, 20000);
  EXPECT_EQ(t.first_tier_where, "GET /get_server_info max_total_num_tokens");
  EXPECT_TRUE(t.second_tier);
  EXPECT_THAT(t.second_tier_where, HasSubstr("enable_hierarchical_cache"));
  EXPECT_EQ(t.DefaultEvictTokens(), 25000);
}

TEST(CacheTiersTest, SglangWithoutHiCacheHasOneTier) {
  const InfoServer s("/get_server_info",
                     R"({"enable_hierarchical_cache": false,
                         "hicache_storage_backend": null,
                         "max_total_num_tokens": 20000})");
  EXPECT_FALSE(s.Read().second_tier);
}

TEST(CacheTiersTest, AnEndpointThatRefusesTheKeyStatesNothing) {
  const InfoServer s("/version", R"({"engine": "kvcanary",
      "kv_cache_tokens": 1024, "host_tier_pages": 256})");
  const CacheTiers t = s.Read("sk-wrong");
  EXPECT_FALSE(t.second_tier);
  EXPECT_EQ(t.first_tier_tokens, 0);
}

TEST(CacheTiersTest, FillersBelowTheFirstTierLeaveTheSecondUnchecked) {
  CacheTiers t;
  t.second_tier = true;
  t.second_tier_where = "GET /version host_tier_pages 256 (host tier)";
  t.first_tier_tokens = 1024;
  t.first_tier_where = "GET /version kv_cache_tokens";
  EXPECT_THAT(t.Unchecked(0), HasSubstr("host_tier_pages 256"));
  EXPECT_THAT(t.Unchecked(1023),
              HasSubstr("below the first tier's 1024 tokens"));
  EXPECT_EQ(t.Unchecked(1024), "");
  EXPECT_EQ(t.Unchecked(t.DefaultEvictTokens()), "");
}

TEST(CacheTiersTest, ASecondTierOfAFirstTierOfUnstatedSizeNeedsFillers) {
  CacheTiers t;
  t.second_tier = true;
  t.second_tier_where = "GET /get_server_info enable_hierarchical_cache";
  EXPECT_EQ(t.DefaultEvictTokens(), 0);
  EXPECT_THAT(t.Unchecked(0), HasSubstr("which the target does not state"));
  EXPECT_THAT(t.Unchecked(5000), HasSubstr("which the target does not state"));
}

}  // namespace
}  // namespace kvcanary::auditor
