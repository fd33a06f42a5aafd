// Usage in answers (cached tokens), stream_options, and the reason an
// access log records for a failed request.
#include <string>

#include "absl/strings/cord.h"
#include "engine/nodes/openai_api.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {
namespace {

using json = nlohmann::json;

CompletionResult Result(int cached_tokens) {
  CompletionResult r;
  r.id = "cmpl-7";
  r.model = "m";
  r.text = "hi";
  r.finish_reason = "length";
  r.prompt_tokens = 40;
  r.completion_tokens = 2;
  r.cached_tokens = cached_tokens;
  return r;
}

json SsePayload(const std::string& event) {
  return json::parse(event.substr(6, event.size() - 8));
}

TEST(OpenAiUsageTest, AnswerReportsCachedTokensInPromptTokensDetails) {
  for (bool chat : {false, true}) {
    const json body = json::parse(CompletionResponseJson({Result(32)}, chat));
    EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
    EXPECT_EQ(body["usage"]["prompt_tokens"], 40);
    EXPECT_EQ(body["usage"]["total_tokens"], 42);
  }
}

TEST(OpenAiUsageTest, NoCacheHitIsReportedAsZeroNotLeftOut) {
  const json body = json::parse(CompletionResponseJson({Result(0)}, false));
  ASSERT_TRUE(body["usage"].contains("prompt_tokens_details"));
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST(OpenAiUsageTest, OnlyTheFinalStreamChunkCarriesUsageWithCachedTokens) {
  const CompletionResult r = Result(16);
  EXPECT_FALSE(
      SsePayload(StreamChunkSse(r, "x", true, false)).contains("usage"));
  const json last = SsePayload(StreamChunkSse(r, "", true, true));
  EXPECT_EQ(last["usage"]["prompt_tokens_details"]["cached_tokens"], 16);
}

TEST(OpenAiUsageTest, StreamOptionsIncludeUsageIsParsed) {
  auto req = ParseCompletionRequest(
      R"({"prompt":"x","stream":true,"stream_options":{"include_usage":true}})",
      false);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_TRUE(req->include_usage);
  auto plain = ParseCompletionRequest(R"({"prompt":"x","stream":true})", false);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->include_usage);
  auto nulls = ParseCompletionRequest(
      R"({"prompt":"x","stream_options":{"include_usage":null}})", false);
  EXPECT_TRUE(nulls.ok()) << nulls.status();
}

TEST(OpenAiUsageTest, StreamOptionsOfTheWrongTypeAre400NamingTheField) {
  for (const char* body :
       {R"({"prompt":"x","stream_options":true})",
        R"({"prompt":"x","stream_options":{"include_usage":"yes"}})"}) {
    auto req = ParseCompletionRequest(body, false);
    ASSERT_FALSE(req.ok()) << body;
    EXPECT_EQ(req.status().code(), absl::StatusCode::kInvalidArgument);
    auto param = req.status().GetPayload(kOpenAiParamUrl);
    ASSERT_TRUE(param.has_value());
    EXPECT_EQ(std::string(*param).rfind("stream_options", 0), 0u);
  }
}

TEST(OpenAiUsageTest, ErrorReasonIsTheCodeElseTheTypeNeverTheMessage) {
  EXPECT_EQ(ErrorReason(ContextLengthExceeded(300, 8, 256, 512)),
            "context_length_exceeded");
  EXPECT_EQ(ErrorReason(absl::UnauthenticatedError("invalid API key")),
            "authentication_error");
  EXPECT_EQ(ErrorReason(absl::ResourceExhaustedError("full")),
            "rate_limit_error");
  EXPECT_EQ(ErrorReason(absl::InvalidArgumentError("invalid JSON: 'secret'")),
            "invalid_request_error");
  EXPECT_EQ(ErrorReason(absl::DataLossError("CRC")), "server_error");
}

}  // namespace
}  // namespace kvcanary::engine
