// OpenAI API answers: completion responses, stream chunks, the models list
// and log-probabilities in OpenAI's shapes (engine/nodes/openai_responses.h).
#include "engine/nodes/openai_responses.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/nodes/openai_logprobs.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {
namespace {

using json = nlohmann::json;

TEST(OpenAiApiTest, LogprobsRenderInOpenAisTwoShapes) {
  const std::vector<LogprobEntry> entries = {
      {" up", -0.5f, {{" up", -0.5f}, {" in", -1.25f}}},
      {"on", -0.25f, {{"in", -0.125f}, {"an", -2.0f}}},
      {"x", std::nullopt, {}}};
  const json completions =
      json::parse(CompletionLogprobsJson(entries, 7).dump());
  EXPECT_EQ(completions["tokens"], json({" up", "on", "x"}));
  EXPECT_EQ(completions["token_logprobs"], json({-0.5, -0.25, nullptr}));
  EXPECT_EQ(completions["text_offset"], json({7, 10, 12}));
  // The token itself joins its alternatives when it is not among them.
  EXPECT_EQ(completions["top_logprobs"][1],
            json({{"in", -0.125}, {"an", -2.0}, {"on", -0.25}}));
  EXPECT_TRUE(completions["top_logprobs"][2].is_null());
  const json chat = json::parse(ChatLogprobsJson(entries).dump());
  EXPECT_TRUE(chat["refusal"].is_null());
  EXPECT_EQ(chat["content"][0]["bytes"], json({32, 117, 112}));
  EXPECT_EQ(chat["content"][1]["top_logprobs"].size(), 2u);
  EXPECT_EQ(chat["content"][1]["top_logprobs"][0]["token"], "in");
  EXPECT_TRUE(chat["content"][2]["logprob"].is_null());
}

TEST(OpenAiApiTest, ChoicesShareOneEnvelopeAndUsage) {
  CompletionResult a;
  a.id = "cmpl-1";
  a.text = "x";
  a.prompt_tokens = 5;
  a.completion_tokens = 3;
  a.cached_tokens = 0;
  CompletionResult b = a;
  b.index = 1;
  b.completion_tokens = 4;
  b.cached_tokens = 4;
  const json body = json::parse(CompletionResponseJson({a, b}, false));
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][1]["index"], 1);
  EXPECT_EQ(body["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(body["usage"]["completion_tokens"], 7);
  EXPECT_EQ(body["usage"]["total_tokens"], 12);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const std::string sse = StreamUsageSse({a, b}, true);
  const json usage = json::parse(sse.substr(6));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], body["usage"]);
  EXPECT_EQ(usage["object"], "chat.completion.chunk");
  // A choice's final chunk without the usage (it comes last, on its own).
  const json last = json::parse(
      StreamChunkSse(b, "", true, true, {}, /*usage=*/false).substr(6));
  EXPECT_FALSE(last.contains("usage"));
  EXPECT_EQ(last["choices"][0]["index"], 1);
}

CompletionResult Result() {
  CompletionResult r;
  r.id = "cmpl-1";
  r.model = "stories15M";
  r.created = 1700000000;
  r.text = "Once upon";
  r.finish_reason = "length";
  r.prompt_tokens = 5;
  r.completion_tokens = 2;
  return r;
}

void ExpectUsage(const json& usage, int prompt, int completion) {
  EXPECT_EQ(usage["prompt_tokens"], prompt);
  EXPECT_EQ(usage["completion_tokens"], completion);
  EXPECT_EQ(usage["total_tokens"], prompt + completion);
}

TEST(OpenAiApiTest, CompletionResponseHasTextCompletionShape) {
  const json body = json::parse(CompletionResponseJson({Result()}, false));
  EXPECT_EQ(body["id"], "cmpl-1");
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["created"], 1700000000);
  EXPECT_EQ(body["model"], "stories15M");
  ASSERT_EQ(body["choices"].size(), 1u);
  const json& choice = body["choices"][0];
  EXPECT_EQ(choice["index"], 0);
  EXPECT_EQ(choice["text"], "Once upon");
  EXPECT_TRUE(choice["logprobs"].is_null());
  EXPECT_EQ(choice["finish_reason"], "length");
  ExpectUsage(body["usage"], 5, 2);
}

TEST(OpenAiApiTest, ChatResponseHasChatCompletionShape) {
  CompletionResult r = Result();
  r.finish_reason = "stop";
  const json body = json::parse(CompletionResponseJson({r}, true));
  EXPECT_EQ(body["object"], "chat.completion");
  const json& choice = body["choices"][0];
  EXPECT_EQ(choice["message"]["role"], "assistant");
  EXPECT_EQ(choice["message"]["content"], "Once upon");
  EXPECT_FALSE(choice.contains("text"));
  EXPECT_EQ(choice["finish_reason"], "stop");
  ExpectUsage(body["usage"], 5, 2);
}

TEST(OpenAiApiTest, ResponseWithInvalidUtf8StaysValidJson) {
  CompletionResult r = Result();
  r.text = "a\xe2\x82";  // a truncated code point
  r.finish_reason = "";
  const json body = json::parse(CompletionResponseJson({r}, false));
  EXPECT_EQ(body["choices"][0]["text"], "a\xef\xbf\xbd");
  EXPECT_TRUE(body["choices"][0]["finish_reason"].is_null());
}

// Checks the SSE framing and returns the event's JSON.
json ParseSse(const std::string& event) {
  EXPECT_TRUE(absl::StartsWith(event, "data: ")) << event;
  EXPECT_TRUE(absl::EndsWith(event, "\n\n")) << event;
  const std::string payload = event.substr(6, event.size() - 8);
  EXPECT_EQ(payload.find('\n'), std::string::npos) << event;
  return json::parse(payload);
}

TEST(OpenAiApiTest, CompletionStreamChunksHaveOpenAiShape) {
  CompletionResult r = Result();
  r.text = "";
  json chunk = ParseSse(StreamChunkSse(r, "Once", false, false));
  EXPECT_EQ(chunk["object"], "text_completion");
  EXPECT_EQ(chunk["id"], "cmpl-1");
  EXPECT_EQ(chunk["choices"][0]["text"], "Once");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(chunk.contains("usage"));

  r.text = "Once";
  chunk = ParseSse(StreamChunkSse(r, " upon", false, true));
  EXPECT_EQ(chunk["choices"][0]["text"], " upon");
  EXPECT_EQ(chunk["choices"][0]["finish_reason"], "length");
  ExpectUsage(chunk["usage"], 5, 2);
}

TEST(OpenAiApiTest, ChatStreamSendsRoleFirstAndUsageLast) {
  CompletionResult r = Result();
  r.text = "";
  json chunk = ParseSse(StreamChunkSse(r, "", true, false));
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"],
            (json{{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());

  r.text = "Once";
  chunk = ParseSse(StreamChunkSse(r, " upon", true, false));
  EXPECT_EQ(chunk["choices"][0]["delta"], (json{{"content", " upon"}}));
  EXPECT_FALSE(chunk.contains("usage"));

  r.text = "Once upon";
  chunk = ParseSse(StreamChunkSse(r, "", true, true));
  EXPECT_EQ(chunk["choices"][0]["delta"], json::object());
  EXPECT_EQ(chunk["choices"][0]["finish_reason"], "length");
  ExpectUsage(chunk["usage"], 5, 2);

  r.text = "";  // a stream of one chunk
  chunk = ParseSse(StreamChunkSse(r, "Hi", true, true));
  EXPECT_EQ(chunk["choices"][0]["delta"],
            (json{{"role", "assistant"}, {"content", "Hi"}}));
}

TEST(OpenAiApiTest, StreamDeltaWithNewlinesStaysOneEvent) {
  CompletionResult r = Result();
  const json chunk = ParseSse(StreamChunkSse(r, "a\n\nb", false, false));
  EXPECT_EQ(chunk["choices"][0]["text"], "a\n\nb");
}

TEST(OpenAiApiTest, StreamDoneIsTheSentinel) {
  EXPECT_EQ(StreamDoneSse(), "data: [DONE]\n\n");
}

TEST(OpenAiApiTest, ModelsJsonListsTheModel) {
  const json body = json::parse(ModelsJson("stories15M", 1700000000, 256, 128));
  EXPECT_EQ(body["data"][0]["max_model_len"], 256);
  EXPECT_EQ(body["data"][0]["max_prompt_tokens"], 128);
  EXPECT_EQ(body["object"], "list");
  ASSERT_EQ(body["data"].size(), 1u);
  EXPECT_EQ(body["data"][0]["id"], "stories15M");
  EXPECT_EQ(body["data"][0]["object"], "model");
  EXPECT_EQ(body["data"][0]["created"], 1700000000);
  EXPECT_TRUE(body["data"][0]["owned_by"].is_string());
}

}  // namespace
}  // namespace kvcanary::engine
