// Request ids across the real cluster: the router names its id in the
// X-Kvcanary-Request-Id header of every completion answer (the same id as
// the body's "cmpl-<id>" and the trace's `request`), and the nodes' internal
// API refuses the one id no request may have (2^64 - 1).
#include <cstdint>
#include <string>

#include "common/page_stamp.h"
#include "common/trace_event.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

constexpr char kHeader[] = "X-Kvcanary-Request-Id";

// The id in a body's "id": "<prefix>-<id>", or "" if there is none.
std::string BodyId(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("id") || !j["id"].is_string()) return "";
  const std::string id = j["id"].get<std::string>();
  const size_t dash = id.rfind('-');
  return dash == std::string::npos ? "" : id.substr(dash + 1);
}

std::string Chat(const std::string& content, int max_tokens) {
  nlohmann::json j;
  j["messages"] = {{{"role", "user"}, {"content", content}}};
  j["max_tokens"] = max_tokens;
  j["temperature"] = 0;
  return j.dump();
}

class RequestIdTest : public SharedClusterTest {};

TEST_F(RequestIdTest, CompletionNamesItsIdInTheHeaderTheBodyAndTheTrace) {
  TraceTap tap(cluster_->decode(), cluster_->trace_token());
  HttpResult a = Post(cluster_->router(), "/v1/completions",
                      Completion("a cat sat", 4), "sk-acme");
  const auto events = tap.Stop();
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_TRUE(a.HasHeader(kHeader));
  EXPECT_EQ(a.Header(kHeader), BodyId(a.body));
  const uint64_t id = std::stoull(a.Header(kHeader));
  EXPECT_EQ(std::to_string(id), a.Header(kHeader));  // plain decimal
  int lifecycle = 0;
  for (const TraceEvent& e : events) {
    EXPECT_EQ(e.version, kTraceVersion2);  // the engine emits kvt2
    if (e.type == TraceEventType::kRequest && e.request == RequestId(id)) {
      ++lifecycle;
      EXPECT_EQ(e.tenant, TenantId(1));
    }
  }
  EXPECT_GT(lifecycle, 0) << "the trace names the same request";
}

TEST_F(RequestIdTest, ChatCompletionCarriesTheHeader) {
  HttpResult a = Post(cluster_->router(), "/v1/chat/completions",
                      Chat("hello", 3), "sk-globex");
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_TRUE(a.HasHeader(kHeader));
  EXPECT_EQ(a.Header(kHeader), BodyId(a.body));
}

TEST_F(RequestIdTest, StreamedCompletionCarriesTheHeader) {
  HttpResult a = Post(cluster_->router(), "/v1/completions",
                      Completion("a cat sat", 4, /*stream=*/true), "sk-acme");
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_TRUE(a.HasHeader(kHeader));
  // Every chunk names the same id.
  const std::string first = a.body.substr(0, a.body.find("\n\n"));
  ASSERT_EQ(first.rfind("data: ", 0), 0u) << a.body;
  EXPECT_EQ(BodyId(first.substr(6)), a.Header(kHeader));
}

TEST_F(RequestIdTest, IdsAreDistinctPerRequest) {
  HttpResult a = Post(cluster_->router(), "/v1/completions",
                      Completion("one", 2), "sk-acme");
  HttpResult b = Post(cluster_->router(), "/v1/completions",
                      Completion("two", 2), "sk-acme");
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_NE(a.Header(kHeader), b.Header(kHeader));
}

TEST_F(RequestIdTest, RefusedBeforeAnIdIsAssignedHasNoHeader) {
  // Authentication and admission come before the id.
  HttpResult unauthenticated = Post(cluster_->router(), "/v1/completions",
                                    Completion("hi", 2), "sk-nobody");
  EXPECT_EQ(unauthenticated.status, 401) << unauthenticated.body;
  EXPECT_FALSE(unauthenticated.HasHeader(kHeader));
  HttpResult too_long = Post(cluster_->router(), "/v1/completions",
                             Completion(LongPrompt(2000), 2), "sk-acme");
  EXPECT_EQ(too_long.status, 400) << too_long.body;
  EXPECT_FALSE(too_long.HasHeader(kHeader));
}

TEST_F(RequestIdTest, NodesRefuseTheReservedRequestIdWith400) {
  nlohmann::json body;
  body["request_id"] = kReservedRequestId.value();
  body["tenant_id"] = 1u;
  body["prompt"] = {1, 5, 9};
  body["max_tokens"] = 2u;
  body["reserved_pages"] = 1u;  // prefill's prefill
  body["transfer_token"] = std::string(32, '0');
  for (const auto& [node, path] :
       {std::pair<std::string, std::string>{cluster_->decode(),
                                            "/internal/v1/generate"},
        {cluster_->prefill(), "/internal/v1/prefill"}}) {
    SCOPED_TRACE(path);
    HttpResult r = Post(node, path, body.dump(), cluster_->internal_secret());
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(r.body.find("reserved"), std::string::npos) << r.body;
  }
}

TEST(RequestIdErrorTest, AnErrorAfterTheIdIsAssignedCarriesIt) {
  // A damaged KV transfer fails the request upstream: 502, with the id.
  Cluster cluster({"--test_transfer_damage=flip-byte"});
  ASSERT_TRUE(cluster.ok());
  HttpResult a = Post(cluster.router(), "/v1/completions",
                      Completion("hello there", 8), "sk-acme");
  EXPECT_EQ(a.status, 502) << a.body;
  ASSERT_TRUE(a.HasHeader(kHeader));
  EXPECT_FALSE(a.Header(kHeader).empty());
  EXPECT_EQ(std::to_string(std::stoull(a.Header(kHeader))), a.Header(kHeader));
}

}  // namespace
}  // namespace kvcanary::testing
