// What nodes report at /internal/v1/limits, what the router makes of it,
// and the GET /version body built from that.
#include "engine/nodes/node_settings.h"

#include "engine/core/engine.h"
#include "engine/nodes/openai_api.h"
#include "engine/nodes/version.h"
#include "gtest/gtest.h"

namespace kvcanary::engine {
namespace {

NodeSettings Node(const std::string& watermark, const std::string& cache,
                  int max_prompt_tokens) {
  NodeSettings s;
  s.max_prompt_tokens = max_prompt_tokens;
  s.context_tokens = 512;
  s.page_tokens = 16;
  s.watermark = watermark;
  s.prefix_cache = cache;
  s.kv_checksum = "crc32c";
  s.trace_format = "kvt2";
  s.version = kEngineVersion;
  return s;
}

TEST(NodeSettingsTest, ANodeReportsWhatItRunsWith) {
  EngineOptions e;
  e.watermark = WatermarkMode::kDetect;
  e.prefix_cache = PrefixCacheMode::kGlobal;
  e.page_tokens = 32;
  const NodeSettings s = NodeSettings::Of(e, 64, 255, 512);
  EXPECT_EQ(s.watermark, "detect");
  EXPECT_EQ(s.prefix_cache, "global");
  EXPECT_EQ(s.page_tokens, 32);
  EXPECT_EQ(s.max_prompt_tokens, 255);
  EXPECT_EQ(s.context_tokens, 512);
  EXPECT_EQ(s.kv_checksum, "crc32c");
  EXPECT_EQ(s.trace_format, "kvt2");
  EXPECT_EQ(s.version, kEngineVersion);
  EXPECT_EQ(s.kv_cache_tokens, 64 * 32);  // the first tier: the page pool
  EXPECT_EQ(s.free_list, "lifo");
  e.free_list = FreeListOrder::kFifo;
  EXPECT_EQ(NodeSettings::Of(e, 64, 255, 512).free_list, "fifo");
  EXPECT_EQ(s.numerics, "invariant");
  e.numerics = Numerics::kVariant;
  EXPECT_EQ(NodeSettings::Of(e, 64, 255, 512).numerics, "variant");
}

TEST(NodeSettingsTest, RoundTripsThroughJson) {
  const NodeSettings s = Node("enforce", "tenant", 256);
  auto back = NodeSettings::FromJson(s.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), s.ToJson());
}

TEST(NodeSettingsTest, LimitsWithoutTheNewFieldsStillParse) {
  auto old = NodeSettings::FromJson(
      {{"max_prompt_tokens", 10}, {"context_tokens", 20}});
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->watermark, "");
  EXPECT_FALSE(NodeSettings::FromJson({{"context_tokens", 20}}).ok());
  EXPECT_FALSE(NodeSettings::FromJson("limits").ok());
}

TEST(NodeSettingsTest, RouterAdmitsAgainstTheSmallestLimits) {
  const ServingSettings s = CombineNodeSettings(
      {Node("enforce", "tenant", 256)}, {Node("enforce", "off", 511)});
  EXPECT_EQ(s.max_prompt_tokens, 256);
  EXPECT_EQ(s.decode_max_prompt_tokens, 511);
  EXPECT_EQ(s.context_tokens, 512);
  EXPECT_EQ(s.page_tokens, 16);
}

TEST(NodeSettingsTest, RouterStatesTheLeastProtectiveSetting) {
  const ServingSettings s = CombineNodeSettings(
      {Node("enforce", "tenant", 256), Node("detect", "global", 256)},
      {Node("enforce", "off", 511)});
  EXPECT_EQ(s.watermark, "detect");
  EXPECT_EQ(s.prefix_cache, "global");
  // A decode node's prefix cache setting is moot: it prefills nothing.
  const ServingSettings d = CombineNodeSettings(
      {Node("enforce", "tenant", 256)}, {Node("off", "global", 511)});
  EXPECT_EQ(d.prefix_cache, "tenant");
  EXPECT_EQ(d.watermark, "off");
}

TEST(NodeSettingsTest, RouterStatesTheFreeListTheNodesAgreeOn) {
  NodeSettings fifo = Node("enforce", "tenant", 256);
  fifo.free_list = "fifo";
  NodeSettings lifo = fifo;
  lifo.free_list = "lifo";
  NodeSettings older = fifo;
  older.free_list = "";  // a node from before the setting
  EXPECT_EQ(CombineNodeSettings({fifo}, {fifo, older}).free_list, "fifo");
  EXPECT_EQ(CombineNodeSettings({fifo}, {lifo}).free_list, "mixed");
  EXPECT_EQ(CombineNodeSettings({older}, {older}).free_list, "");
}

TEST(NodeSettingsTest, RouterStatesTheNumericsTheNodesAgreeOn) {
  NodeSettings variant = Node("enforce", "tenant", 256);
  variant.numerics = "variant";
  NodeSettings invariant = variant;
  invariant.numerics = "invariant";
  NodeSettings older = variant;
  older.numerics = "";
  EXPECT_EQ(CombineNodeSettings({variant}, {variant, older}).numerics,
            "variant");
  EXPECT_EQ(CombineNodeSettings({invariant}, {variant}).numerics, "mixed");
  EXPECT_EQ(CombineNodeSettings({older}, {older}).numerics, "");
  auto back = NodeSettings::FromJson(variant.ToJson());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->numerics, "variant");
}

TEST(VersionJsonTest, StatesTheFreeListWhenKnown) {
  VersionInfo v;
  v.free_list = "fifo";
  EXPECT_NE(VersionJson(v).find(R"("tenant_header":null,"free_list":"fifo"})"),
            std::string::npos)
      << VersionJson(v);
}

TEST(VersionJsonTest, HasEveryFieldInOrder) {
  VersionInfo v;
  v.version = kEngineVersion;
  v.watermark = "detect";
  v.prefix_cache = "global";
  v.kv_checksum = "crc32c";
  v.trace_format = "kvt2";
  v.max_model_len = 512;
  v.max_prompt_tokens = 256;
  v.page_tokens = 16;
  v.kv_cache_tokens = 1024;
  EXPECT_EQ(VersionJson(v),
            std::string(R"({"engine":"kvcanary","version":")") +
                kEngineVersion +
                R"(","disaggregated":true,"kv_checksum":"crc32c",)"
                R"("watermark":"detect","prefix_cache":"global",)"
                R"("trace_format":"kvt2","max_model_len":512,)"
                R"("max_prompt_tokens":256,"page_tokens":16,)"
                R"("kv_cache_tokens":1024,"host_tier_pages":0,)"
                R"("tenant_header":null})");
}

TEST(VersionJsonTest, StatesTheSaltModeAndTheGatewayHeader) {
  VersionInfo v;
  v.cache_salt = "client";
  v.tenant_header = "X-Tenant-Id";
  v.host_tier_pages = 64;
  const std::string json = VersionJson(v);
  EXPECT_NE(json.find(R"("host_tier_pages":64,"tenant_header":"X-Tenant-Id")"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("cache_salt":"client")"), std::string::npos) << json;
}

}  // namespace
}  // namespace kvcanary::engine
