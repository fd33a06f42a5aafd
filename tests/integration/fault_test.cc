// Engine faults reproduced with real processes, and caught.
#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

// Fills the decode node's free pages with globex's K/V: requests that fit,
// run one after another, so their freed pages are handed out next (LIFO).
// Under page-count-mismatch globex's own requests may be refused too (their
// partial last pages are lost as well): `must_succeed` is false there.
void WarmWithGlobex(const Cluster& cluster, bool must_succeed = true) {
  for (int i = 0; i < 3; ++i) {
    HttpResult r = Post(cluster.router(), "/v1/completions",
                        Completion(LongPrompt(60) + " " + std::to_string(i), 8),
                        "sk-globex");
    if (must_succeed) {
      ASSERT_EQ(r.status, 200) << r.body;
    }
  }
}

constexpr int kOverLongWords = 150;  // past the prefill tier's 256, within 512

TEST(AdmissionAbortLostTest, FaultOffOverLongPromptIs400) {
  Cluster cluster({"--watermark=detect"});
  ASSERT_TRUE(cluster.ok());
  HttpResult r = Post(cluster.router(), "/v1/completions",
                      Completion(LongPrompt(kOverLongWords), 8), "sk-acme");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json["error"]["code"], "context_length_exceeded");
}

TEST(AdmissionAbortLostTest,
     DetectServesAndAttributesTheForeignReadToTheWriter) {
  Cluster cluster(
      {"--fault=admission-abort-lost", "--watermark=detect", "--num_pages=64"});
  ASSERT_TRUE(cluster.ok());
  WarmWithGlobex(cluster);
  HttpResult r = Post(cluster.router(), "/v1/completions",
                      Completion(LongPrompt(kOverLongWords), 8), "sk-acme");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string metrics = Get(cluster.decode(), "/metrics").body;
  // globex is tenant 2 in the tenants file: its data reached acme.
  EXPECT_GT(
      MetricValue(
          metrics, "kvcanary_node_watermark_violations_total",
          "role=\"decode\",kind=\"foreign_tenant_read\",writer_tenant=\"2\""),
      0)
      << metrics;
}

TEST(AdmissionAbortLostTest, EnforceFailsTheRequestWithNoText) {
  Cluster cluster({"--fault=admission-abort-lost", "--watermark=enforce",
                   "--num_pages=64"});
  ASSERT_TRUE(cluster.ok());
  WarmWithGlobex(cluster);
  HttpResult r = Post(cluster.router(), "/v1/completions",
                      Completion(LongPrompt(kOverLongWords), 8), "sk-acme");
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_FALSE(r.json.contains("choices")) << r.body;
  EXPECT_NE(r.body.find("watermark"), std::string::npos) << r.body;
}

TEST(AdmissionAbortLostTest, WatermarksOffShowTheIncidentSignature) {
  Cluster cluster(
      {"--fault=admission-abort-lost", "--watermark=off", "--num_pages=64"});
  ASSERT_TRUE(cluster.ok());
  WarmWithGlobex(cluster);
  const std::string prompt = LongPrompt(kOverLongWords);
  HttpResult r = Post(cluster.router(), "/v1/completions",
                      Completion(prompt, 8), "sk-acme");
  // HTTP 200, the real prompt_tokens, a completion: nothing looks wrong.
  ASSERT_EQ(r.status, 200) << r.body;
  const int real_prompt_tokens = r.json["usage"]["prompt_tokens"].get<int>();
  EXPECT_GT(real_prompt_tokens, 256);
  EXPECT_GT(r.json["usage"]["completion_tokens"].get<int>(), 0);
  EXPECT_EQ(MetricValue(Get(cluster.decode(), "/metrics").body,
                        "kvcanary_node_watermark_violations_total", "kind="),
            -1);
}

}  // namespace
}  // namespace kvcanary::testing

namespace kvcanary::testing {
namespace {

// page-count-mismatch: a prompt whose last page is partial loses that page
// in transit, decode commits anyway and reads the page as it found it.
HttpResult RunPageCountMismatch(Cluster& cluster) {
  WarmWithGlobex(cluster, /*must_succeed=*/false);
  return Post(cluster.router(), "/v1/completions",
              Completion(LongPrompt(30), 8), "sk-acme");
}

TEST(PageCountMismatchTest, DetectAttributesTheStaleLastPageToItsWriter) {
  Cluster cluster(
      {"--fault=page-count-mismatch", "--watermark=detect", "--num_pages=64"});
  ASSERT_TRUE(cluster.ok());
  HttpResult r = RunPageCountMismatch(cluster);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_NE(r.json["usage"]["prompt_tokens"].get<int>() % 16, 0)
      << "need a partial page";
  const std::string metrics = Get(cluster.decode(), "/metrics").body;
  EXPECT_GT(
      MetricValue(
          metrics, "kvcanary_node_watermark_violations_total",
          "role=\"decode\",kind=\"foreign_tenant_read\",writer_tenant=\"2\""),
      0)
      << metrics;
}

TEST(PageCountMismatchTest, EnforceFailsTheRequest) {
  Cluster cluster(
      {"--fault=page-count-mismatch", "--watermark=enforce", "--num_pages=64"});
  ASSERT_TRUE(cluster.ok());
  HttpResult r = RunPageCountMismatch(cluster);
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_FALSE(r.json.contains("choices")) << r.body;
}

TEST(PageCountMismatchTest, FaultOffTheSameRequestIsClean) {
  Cluster cluster({"--watermark=detect", "--num_pages=64"});
  ASSERT_TRUE(cluster.ok());
  HttpResult r = RunPageCountMismatch(cluster);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(MetricValue(Get(cluster.decode(), "/metrics").body,
                        "kvcanary_node_watermark_violations_total", "kind="),
            -1);
}

}  // namespace
}  // namespace kvcanary::testing
