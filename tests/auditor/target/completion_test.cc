// Completions as servers send them: plain bodies, SSE streams with usage in
// the last chunk, and errors wherever a server puts them — a status, an
// error body, or an error event inside a stream that began with HTTP 200.
#include "auditor/target/completion.h"

#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

ProbeResponse Response(int status, std::string body) {
  ProbeResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

TEST(CompletionTest, PlainBodyGivesTextUsageAndIds) {
  ProbeResponse r = Response(
      200,
      R"({"id":"cmpl-42","choices":[{"text":" hello"}],"usage":{"prompt_tokens":7,"prompt_tokens_details":{"cached_tokens":3}}})");
  r.headers["x-kvcanary-request-id"] = "42";
  const Completion c = ParseCompletion(r, false);
  ASSERT_TRUE(c.usable) << c.error;
  EXPECT_EQ(c.text, " hello");
  EXPECT_EQ(c.prompt_tokens, 7);
  EXPECT_EQ(c.cached_tokens, 3);
  EXPECT_EQ(c.response_id, "cmpl-42");
  EXPECT_EQ(c.engine_request, 42u);
  EXPECT_EQ(Outcome(c), "ok");
}

TEST(CompletionTest, StreamWithUsageInAFinalChunkWithoutChoices) {
  const Completion c = ParseCompletion(
      Response(200,
               "data: {\"id\":\"cmpl-1\",\"choices\":[{\"text\":\"a\"}]}\n\n"
               "data: {\"id\":\"cmpl-1\",\"choices\":[{\"text\":\"b\"}]}\n\n"
               "data: {\"id\":\"cmpl-1\",\"choices\":[],\"usage\":{\"prompt_"
               "tokens\":12}}\n\n"
               "data: [DONE]\n\n"),
      true);
  ASSERT_TRUE(c.usable) << c.error;
  EXPECT_EQ(c.text, "ab");
  EXPECT_EQ(c.prompt_tokens, 12);
}

// llama.cpp's server: prompt_tokens is the whole prompt, timings.prompt_n
// what it evaluated; builds before usage_json_oaicompat send no
// prompt_tokens_details. A repeat its slot holds evaluates 1 of 106.
TEST(CompletionTest, LlamaCppTimingsGiveCachedTokensWhereUsageHasNone) {
  const Completion plain = ParseCompletion(
      Response(200,
               R"({"choices":[{"text":" x"}],"usage":{"prompt_tokens":106,)"
               R"("completion_tokens":1},"timings":{"cache_n":105,)"
               R"("prompt_n":1,"prompt_ms":0.4}})"),
      false);
  ASSERT_TRUE(plain.usable) << plain.error;
  EXPECT_EQ(plain.cached_tokens, 105);
  EXPECT_EQ(plain.cached_from, CachedTokensFrom::kTimings);
  EXPECT_EQ(plain.evaluated_tokens, 1);
  EXPECT_STREQ(CachedTokensFromName(plain.cached_from), "timings.prompt_n");
  // Streamed: timings on the last chunk, usage in the one before or the same.
  const Completion stream = ParseCompletion(
      Response(200, R"(data: {"choices":[{"text":"a","finish_reason":null}]})"
                    "\n\n"
                    R"(data: {"choices":[],"usage":{"prompt_tokens":40},)"
                    R"("timings":{"prompt_n":40,"cache_n":0}})"
                    "\n\n"
                    "data: [DONE]\n\n"),
      true);
  ASSERT_TRUE(stream.usable) << stream.error;
  EXPECT_EQ(stream.cached_tokens, 0);
  EXPECT_EQ(stream.cached_from, CachedTokensFrom::kTimings);
}

TEST(CompletionTest, PromptTokensDetailsWinOverTimingsAndNeitherIsUnknown) {
  const Completion both = ParseCompletion(
      Response(200, R"({"choices":[{"text":" x"}],"usage":{"prompt_tokens":50,)"
                    R"("prompt_tokens_details":{"cached_tokens":32}},)"
                    R"("timings":{"prompt_n":20}})"),
      false);
  EXPECT_EQ(both.cached_tokens, 32);
  EXPECT_EQ(both.cached_from, CachedTokensFrom::kPromptTokensDetails);
  // Timings without a prompt count say nothing of the cache.
  const Completion no_count = ParseCompletion(
      Response(200, R"({"choices":[{"text":" x"}],"timings":{"prompt_n":3}})"),
      false);
  EXPECT_EQ(no_count.cached_tokens, -1);
  EXPECT_EQ(no_count.cached_from, CachedTokensFrom::kNone);
  const Completion none = ParseCompletion(
      Response(200,
               R"({"choices":[{"text":" x"}],"usage":{"prompt_tokens":9}})"),
      false);
  EXPECT_EQ(none.cached_tokens, -1);
  EXPECT_STREQ(CachedTokensFromName(none.cached_from), "not reported");
}

TEST(CompletionTest, ChatDeltasAreText) {
  const Completion c = ParseCompletion(
      Response(200,
               "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"
               "data: [DONE]\n\n"),
      true);
  ASSERT_TRUE(c.usable);
  EXPECT_EQ(c.text, "x");
}

TEST(CompletionTest, ErrorChunkInsideA200StreamIsARefusalNotASuccess) {
  const Completion c = ParseCompletion(
      Response(200,
               "data: {\"error\":{\"object\":\"error\",\"message\":\"too "
               "long\",\"type\":\"BadRequestError\",\"code\":400}}\n\n"
               "data: [DONE]\n\n"),
      true);
  EXPECT_FALSE(c.usable);
  EXPECT_TRUE(c.http_ok_error);
  EXPECT_EQ(c.status, 400);
  EXPECT_EQ(Outcome(c), "http_4xx");
  EXPECT_EQ(c.error.message().find("did not end with [DONE]"),
            std::string::npos)
      << c.error;
}

TEST(CompletionTest, ErrorLineInsideA200StreamIsARefusal) {
  const Completion c = ParseCompletion(
      Response(200,
               "error: {\"code\":400,\"message\":\"the request exceeds the "
               "available context size\",\"type\":\"exceed_context_size_"
               "error\"}\n\n"
               "data: [DONE]\n\n"),
      true);
  EXPECT_FALSE(c.usable);
  EXPECT_EQ(c.status, 400);
}

TEST(CompletionTest, ErrorEventTypeMapsToAStatusWithoutACode) {
  const Completion c = ParseCompletion(
      Response(200,
               "event: error\ndata: {\"error\":\"Input validation error: "
               "inputs too long\",\"error_type\":\"validation\"}\n\n"),
      true);
  EXPECT_FALSE(c.usable);
  EXPECT_EQ(c.status, 422);
}

TEST(CompletionTest, DoneWithoutAnyChunkIsNotAnEmptyAnswer) {
  const Completion c = ParseCompletion(Response(200, "data: [DONE]\n\n"), true);
  EXPECT_FALSE(c.usable);
  EXPECT_EQ(Outcome(c), "dropped_stream");
  EXPECT_NE(c.error.message().find("no chunk with a choice"),
            std::string::npos);
}

TEST(CompletionTest, ZeroUsageChunksDoNotHideTheRealCount) {
  const Completion c = ParseCompletion(
      Response(200,
               "data: {\"choices\":[{\"text\":\"a\"}],\"usage\":{\"prompt_"
               "tokens\":0}}\n\n"
               "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9}}\n\n"
               "data: {\"choices\":[{\"text\":\"\"}],\"usage\":{\"prompt_"
               "tokens\":0}}\n\n"
               "data: [DONE]\n\n"),
      true);
  ASSERT_TRUE(c.usable);
  EXPECT_EQ(c.prompt_tokens, 9);
}

TEST(CompletionTest, ErrorObjectInA200PlainBody) {
  const Completion c = ParseCompletion(
      Response(
          200,
          R"({"error":{"message":"bad key","type":"authentication_error"}})"),
      false);
  EXPECT_FALSE(c.usable);
  EXPECT_EQ(c.status, 401);
}

TEST(CompletionTest, ErrorObjectStatusPrefersTheNumericCode) {
  EXPECT_EQ(ErrorObjectStatus(nlohmann::json::parse(
                R"({"code":429,"type":"invalid_request_error"})")),
            429);
  EXPECT_EQ(
      ErrorObjectStatus(nlohmann::json::parse(R"({"code":"400","type":"x"})")),
      400);
  EXPECT_EQ(ErrorObjectStatus(
                nlohmann::json::parse(R"({"type":"rate_limit_exceeded"})")),
            429);
  EXPECT_EQ(ErrorObjectStatus(nlohmann::json::parse(R"({"type":"weird"})")),
            500);
  EXPECT_EQ(ErrorObjectStatus(
                nlohmann::json("Input validation error"),
                nlohmann::json::parse(R"({"error_type":"validation"})")),
            422);
}

TEST(CompletionTest, ErrorTypesAreMatchedWordByWord) {
  auto status = [](const char* type) {
    return ErrorObjectStatus(nlohmann::json{{"type", type}});
  };
  EXPECT_EQ(status("Generation failed"), 500);  // not a "rate"
  EXPECT_EQ(status("moderate"), 500);
  EXPECT_EQ(status("unauthorized"), 401);  // not an "author"ization
  EXPECT_EQ(status("AuthenticationError"), 401);
  EXPECT_EQ(status("PermissionDeniedError"), 403);
  EXPECT_EQ(status("NotFoundError"), 404);
  EXPECT_EQ(status("rate_limit_exceeded"), 429);
  EXPECT_EQ(status("RateLimitError"), 429);
  EXPECT_EQ(status("exceed_context_size_error"), 400);
  EXPECT_EQ(status("BadRequestError"), 400);
  EXPECT_EQ(status("invalid_request_error"), 400);
}

TEST(CompletionTest, A200WithoutAChoiceCarryingTextIsNotAnAnswer) {
  EXPECT_FALSE(
      ParseCompletion(Response(200, R"({"usage":{"prompt_tokens":5}})"), false)
          .usable);
  EXPECT_FALSE(
      ParseCompletion(Response(200, R"({"choices":[],"usage":{}})"), false)
          .usable);
  EXPECT_FALSE(
      ParseCompletion(Response(200, R"({"choices":[{"index":0}]})"), false)
          .usable);
  // A stream of usage only.
  EXPECT_FALSE(
      ParseCompletion(Response(200,
                               "data: {\"choices\":[],\"usage\":{\"prompt_"
                               "tokens\":5}}\n\ndata: [DONE]\n\n"),
                      true)
          .usable);
  // An empty text is still an answer (of nothing).
  EXPECT_TRUE(
      ParseCompletion(Response(200, R"({"choices":[{"text":""}]})"), false)
          .usable);
}

TEST(CompletionTest, ErrorMessagesAreCutOnACharacterBoundary) {
  std::string message(199, 'x');
  message += "\u00e9\u00e9";  // two-byte characters across the cut
  const Completion c = ParseCompletion(
      Response(200, nlohmann::json{{"error", {{"message", message}}}}.dump()),
      false);
  ASSERT_FALSE(c.usable);
  // Valid UTF-8: nlohmann throws on dump() otherwise.
  EXPECT_NO_THROW(nlohmann::json(std::string(c.error.message())).dump());
}

// A stream that dies after its headers is not an answer: a dropped stream,
// counted apart from a 200 body without a completion.
TEST(CompletionTest, StreamWithoutDoneIsADroppedStreamNotAnAnswer) {
  const Completion c = ParseCompletion(
      Response(200, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n"), true);
  EXPECT_FALSE(c.usable);
  EXPECT_TRUE(c.dropped_stream);
  EXPECT_EQ(Outcome(c), "dropped_stream");
  const Completion body = ParseCompletion(Response(200, "{}"), false);
  EXPECT_FALSE(body.dropped_stream);
  EXPECT_EQ(Outcome(body), "bad_response");
  EXPECT_NE(c.error.message().find("[DONE]"), std::string::npos);
}

TEST(CompletionTest, TransportErrorAndHttpErrors) {
  ProbeResponse r;
  r.transport = absl::UnavailableError("connection refused");
  EXPECT_EQ(Outcome(ParseCompletion(r, false)), "transport_error");
  EXPECT_EQ(Outcome(ParseCompletion(Response(400, "{}"), false)), "http_4xx");
  EXPECT_EQ(Outcome(ParseCompletion(Response(503, ""), true)), "http_5xx");
  // A provider's "slow down" is neither (rate_limit.h).
  ProbeResponse overloaded = Response(503, "");
  overloaded.headers["retry-after"] = "1";
  EXPECT_EQ(Outcome(ParseCompletion(overloaded, true)), "rate_limited");
  EXPECT_EQ(Outcome(ParseCompletion(Response(429, "{}"), false)),
            "rate_limited");
}

TEST(CompletionTest, ReadsCompletionTokensAndRetryAfter) {
  ProbeResponse r =
      Response(200, R"({"choices":[{"text":"hi"}],"usage":{"prompt_tokens":7,)"
                    R"("completion_tokens":3,"total_tokens":10}})");
  r.headers["retry-after"] = "2";
  const Completion c = ParseCompletion(r, false);
  EXPECT_EQ(c.completion_tokens, 3);
  EXPECT_EQ(c.retry_after, absl::Seconds(2));
  // llama.cpp's own shape counts what it generated as tokens_predicted.
  const Completion legacy = ParseCompletion(
      Response(200, R"({"content":"hi","stop":true,"tokens_evaluated":7,)"
                    R"("tokens_predicted":4})"),
      false);
  EXPECT_EQ(legacy.completion_tokens, 4);
  EXPECT_FALSE(legacy.retry_after.has_value());
}

}  // namespace
}  // namespace kvcanary::auditor
