#include "engine/nodes/openai_api.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {
namespace {

using json = nlohmann::json;

std::string ParamOf(const absl::Status& status) {
  auto p = status.GetPayload(kOpenAiParamUrl);
  return p ? std::string(*p) : "";
}

// Parses a completions body with `field` (raw JSON text) added to a valid
// prompt; returns the status.
absl::Status WithField(absl::string_view field, bool chat = false) {
  const std::string base =
      chat ? R"("messages":[{"role":"user","content":"hi"}])"
           : R"("prompt":"hi")";
  return ParseCompletionRequest(absl::StrCat("{", base, ",", field, "}"), chat)
      .status();
}

TEST(OpenAiApiTest, ParsesCompletionWithDefaults) {
  auto req = ParseCompletionRequest(R"({"model":"m","prompt":"Once"})", false);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_FALSE(req->chat);
  EXPECT_EQ(req->model, "m");
  EXPECT_EQ(req->prompt, "Once");
  EXPECT_EQ(req->max_tokens, 16);
  EXPECT_FLOAT_EQ(req->temperature, 1.0f);
  EXPECT_FLOAT_EQ(req->top_p, 1.0f);
  EXPECT_FALSE(req->seed.has_value());
  EXPECT_TRUE(req->stop.empty());
  EXPECT_FALSE(req->stream);
}

TEST(OpenAiApiTest, ParsesEveryKnownField) {
  auto req = ParseCompletionRequest(
      R"({"model":"m","prompt":["Once"],"max_tokens":7,"temperature":0,
          "top_p":0.5,"seed":42,"stop":["\n","END"],"stream":true,"n":1,
          "best_of":1,"echo":false,"logprobs":null,"user":"x",
          "presence_penalty":0.1,"stream_options":{"include_usage":true}})",
      false);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->prompt, "Once");
  EXPECT_EQ(req->max_tokens, 7);
  EXPECT_FLOAT_EQ(req->temperature, 0.0f);
  EXPECT_FLOAT_EQ(req->top_p, 0.5f);
  EXPECT_EQ(req->seed, 42u);
  EXPECT_EQ(req->stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(req->stream);
}

TEST(OpenAiApiTest, NullFieldsCountAsAbsent) {
  auto req = ParseCompletionRequest(
      R"({"prompt":"x","max_tokens":null,"stop":null,"seed":null,"model":null})",
      false);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->max_tokens, 16);
  EXPECT_TRUE(req->stop.empty());
  EXPECT_FALSE(req->seed.has_value());
}

TEST(OpenAiApiTest, StopMayBeASingleString) {
  auto req = ParseCompletionRequest(R"({"prompt":"x","stop":"."})", false);
  ASSERT_TRUE(req.ok());
  EXPECT_EQ(req->stop, std::vector<std::string>{"."});
}

TEST(OpenAiApiTest, MalformedJsonOrNonObjectIsInvalidArgument) {
  for (const char* body : {"", "{", "{\"prompt\":}", "nul", "{\"a\":1} x"}) {
    auto req = ParseCompletionRequest(body, false);
    ASSERT_EQ(req.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_TRUE(absl::StartsWith(req.status().message(), "invalid JSON: "))
        << req.status();
  }
  EXPECT_EQ(ParseCompletionRequest("[1]", false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(OpenAiApiTest, BytesAfterTheBodyOrADuplicateKeyAreInvalidArgument) {
  const std::string nul = std::string(R"({"prompt":"hi","max_tokens":1})") +
                          '\0' + R"({"max_tokens":400000})";
  auto smuggled = ParseCompletionRequest(nul, false);
  ASSERT_EQ(smuggled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(smuggled.status().message(), "invalid JSON: "));
  auto twice = ParseCompletionRequest(
      R"({"prompt":"hi","max_tokens":1,"max_tokens":9})", false);
  ASSERT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParamOf(twice.status()), "max_tokens");
  auto role =
      WithField(R"("messages":[{"role":"user","content":"a","role":"system"}])",
                /*chat=*/true);
  ASSERT_EQ(role.code(), absl::StatusCode::kInvalidArgument);
  // WithField's own "messages" comes first: the top-level key is the
  // duplicate.
  EXPECT_EQ(ParamOf(role), "messages");
  auto nested = ParseCompletionRequest(
      R"({"messages":[{"role":"user","content":"a","role":"system"}]})", true);
  EXPECT_EQ(ParamOf(nested.status()), "messages[0].role");
  EXPECT_NE(ErrorBody(nested.status()).find(R"("param":"messages[0].role")"),
            std::string::npos)
      << ErrorBody(nested.status());
}

TEST(OpenAiApiTest, EveryWrongTypeFieldIsRejectedNamingIt) {
  const struct {
    const char* field;
    const char* param;
  } cases[] = {
      {R"("model":3)", "model"},
      {R"("max_tokens":"ten")", "max_tokens"},
      {R"("max_tokens":10.5)", "max_tokens"},
      {R"("max_tokens":true)", "max_tokens"},
      {R"("temperature":true)", "temperature"},
      {R"("temperature":"hot")", "temperature"},
      {R"("top_p":[1])", "top_p"},
      {R"("seed":"7")", "seed"},
      {R"("seed":1.5)", "seed"},
      {R"("stop":5)", "stop"},
      {R"("stop":["a",1])", "stop[1]"},
      {R"("stream":"yes")", "stream"},
      {R"("stream":1)", "stream"},
      {R"("n":"1")", "n"},
      {R"("best_of":"1")", "best_of"},
      {R"("echo":"no")", "echo"},
  };
  for (const auto& c : cases) {
    const absl::Status status = WithField(c.field);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(ParamOf(status), c.param) << c.field;
    EXPECT_TRUE(absl::StrContains(status.message(), c.param))
        << c.field << ": " << status;
  }
}

TEST(OpenAiApiTest, PromptMustBeAStringOrOneString) {
  for (const char* body :
       {R"({})", R"({"prompt":5})", R"({"prompt":[1,2,3]})",
        R"({"prompt":["a","b"]})", R"({"prompt":[]})", R"({"prompt":{}})"}) {
    const absl::Status status = ParseCompletionRequest(body, false).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_EQ(ParamOf(status), "prompt") << body;
  }
  EXPECT_TRUE(ParseCompletionRequest(R"({"prompt":""})", false).ok());
}

TEST(OpenAiApiTest, RangesAreEnforced) {
  for (const char* field :
       {R"("max_tokens":1)", R"("max_tokens":1048576)", R"("temperature":0)",
        R"("temperature":2)", R"("top_p":0.01)", R"("top_p":1)", R"("seed":0)",
        R"("seed":18446744073709551615)", R"("stop":[])",
        R"("stop":["a","b","c","d"])"}) {
    EXPECT_TRUE(WithField(field).ok()) << field;
  }
  for (const char* field :
       {R"("max_tokens":0)", R"("max_tokens":1048577)", R"("max_tokens":-1)",
        R"("max_tokens":1e3)", R"("max_tokens":18446744073709551615)",
        R"("temperature":2.01)", R"("temperature":-0.1)", R"("top_p":0)",
        R"("top_p":1.5)", R"("seed":-1)", R"("stop":"")", R"("stop":["a",""])",
        R"("stop":["a","b","c","d","e"])"}) {
    EXPECT_EQ(WithField(field).code(), absl::StatusCode::kInvalidArgument)
        << field;
  }
}

TEST(OpenAiApiTest, ChoicesLogprobsAndEchoWithinTheirBounds) {
  for (const char* field :
       {R"("n":1)", R"("n":8)", R"("best_of":1)", R"("echo":false)",
        R"("echo":true)", R"("logprobs":null)", R"("logprobs":false)",
        R"("logprobs":0)", R"("logprobs":20)"}) {
    EXPECT_TRUE(WithField(field).ok()) << field;
  }
  for (const char* field :
       {R"("n":9)", R"("n":0)", R"("best_of":3)", R"("logprobs":true)",
        R"("logprobs":21)", R"("logprobs":-1)"}) {
    EXPECT_EQ(WithField(field).code(), absl::StatusCode::kInvalidArgument)
        << field;
  }
  // Chat: logprobs is a boolean, top_logprobs needs it, and no echo.
  for (const char* field :
       {R"("logprobs":true)", R"("logprobs":false)",
        R"("logprobs":true,"top_logprobs":20)", R"("n":2)"}) {
    EXPECT_TRUE(WithField(field, true).ok()) << field;
  }
  for (const char* field :
       {R"("logprobs":3)", R"("top_logprobs":2)",
        R"("logprobs":true,"top_logprobs":21)", R"("echo":true)"}) {
    EXPECT_EQ(WithField(field, true).code(), absl::StatusCode::kInvalidArgument)
        << field;
  }
  auto req = ParseCompletionRequest(
      R"({"messages":[{"role":"user","content":"hi"}],"logprobs":true,
          "top_logprobs":3,"n":2})",
      true);
  ASSERT_TRUE(req.ok());
  EXPECT_EQ(req->logprobs, 3);
  EXPECT_EQ(req->n, 2);
}

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

TEST(OpenAiApiTest, UnknownFieldsAreIgnored) {
  EXPECT_TRUE(WithField(R"("frequency_penalty":"whatever","tools":[{}])").ok());
}

TEST(OpenAiApiTest, ChatRendersContentsJoinedByNewline) {
  auto req = ParseCompletionRequest(
      R"({"model":"m","messages":[
            {"role":"system","content":"Be brief."},
            {"role":"user","content":"Hi"},
            {"role":"assistant","content":"Hello"},
            {"role":"user","content":"Bye","name":"bob"}]})",
      true);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_TRUE(req->chat);
  EXPECT_EQ(req->prompt, "Be brief.\nHi\nHello\nBye");
}

TEST(OpenAiApiTest, ChatIgnoresPromptAndRequiresMessages) {
  const absl::Status status =
      ParseCompletionRequest(R"({"prompt":"x"})", true).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParamOf(status), "messages");
}

TEST(OpenAiApiTest, ChatMessagesAreValidated) {
  const struct {
    const char* messages;
    const char* param;
  } cases[] = {
      {R"("x")", "messages"},
      {R"([])", "messages"},
      {R"(["hi"])", "messages[0]"},
      {R"([{"content":"hi"}])", "messages[0].role"},
      {R"([{"role":"tool","content":"hi"}])", "messages[0].role"},
      {R"([{"role":1,"content":"hi"}])", "messages[0].role"},
      {R"([{"role":"user","content":"a"},{"role":"user"}])",
       "messages[1].content"},
      {R"([{"role":"user","content":5}])", "messages[0].content"},
  };
  for (const auto& c : cases) {
    const absl::Status status =
        ParseCompletionRequest(absl::StrCat(R"({"messages":)", c.messages, "}"),
                               true)
            .status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.messages;
    EXPECT_EQ(ParamOf(status), c.param) << c.messages;
  }
}

TEST(OpenAiApiTest, ChatAcceptsMaxCompletionTokens) {
  auto req = ParseCompletionRequest(
      R"({"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":9})",
      true);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->max_tokens, 9);
  EXPECT_FALSE(
      WithField(R"("max_tokens":3,"max_completion_tokens":4)", true).ok());
  EXPECT_TRUE(
      WithField(R"("max_tokens":4,"max_completion_tokens":4)", true).ok());
}

TEST(OpenAiApiTest, HttpStatusForMapsEveryCode) {
  using C = absl::StatusCode;
  EXPECT_EQ(HttpStatusFor(C::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(C::kOutOfRange), 400);
  EXPECT_EQ(HttpStatusFor(C::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusFor(C::kPermissionDenied), 403);
  EXPECT_EQ(HttpStatusFor(C::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(C::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFor(C::kDataLoss), 502);
  EXPECT_EQ(HttpStatusFor(C::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(C::kDeadlineExceeded), 504);
  for (C c : {C::kInternal, C::kUnknown, C::kAborted, C::kCancelled,
              C::kFailedPrecondition, C::kUnimplemented, C::kAlreadyExists}) {
    EXPECT_EQ(HttpStatusFor(c), 500) << absl::StatusCodeToString(c);
  }
}

// Parses an error body and checks the OpenAI shape.
json ParseErrorBody(const std::string& text) {
  const json body = json::parse(text);
  EXPECT_TRUE(body.is_object());
  EXPECT_EQ(body.size(), 1u);
  const json& error = body.at("error");
  EXPECT_TRUE(error.at("message").is_string());
  EXPECT_TRUE(error.at("type").is_string());
  EXPECT_TRUE(error.at("param").is_null() || error.at("param").is_string());
  EXPECT_TRUE(error.at("code").is_null() || error.at("code").is_string());
  return error;
}

TEST(OpenAiApiTest, ErrorBodyHasOpenAiShapeAndTypes) {
  const struct {
    absl::Status status;
    const char* type;
  } cases[] = {
      {absl::InvalidArgumentError("bad"), "invalid_request_error"},
      {absl::NotFoundError("no model"), "invalid_request_error"},
      {absl::UnauthenticatedError("who"), "authentication_error"},
      {absl::PermissionDeniedError("no"), "permission_error"},
      {absl::ResourceExhaustedError("slow down"), "rate_limit_error"},
      {absl::UnavailableError("down"), "server_error"},
      {absl::DataLossError("crc"), "server_error"},
      {absl::InternalError("oops"), "server_error"},
  };
  for (const auto& c : cases) {
    const json error = ParseErrorBody(ErrorBody(c.status));
    EXPECT_EQ(error["type"], c.type) << c.status;
    EXPECT_EQ(error["message"], std::string(c.status.message()));
    EXPECT_TRUE(error["param"].is_null());
    EXPECT_TRUE(error["code"].is_null());
  }
}

TEST(OpenAiApiTest, ErrorBodyCarriesParamFromParseOrArgument) {
  const absl::Status status = WithField(R"("max_tokens":"ten")");
  json error = ParseErrorBody(ErrorBody(status));
  EXPECT_EQ(error["param"], "max_tokens");
  EXPECT_EQ(error["type"], "invalid_request_error");
  error = ParseErrorBody(ErrorBody(status, "other"));
  EXPECT_EQ(error["param"], "other");
}

TEST(OpenAiApiTest, ErrorBodyOfBadJsonIsValidJson) {
  // The parser's message quotes raw input, here invalid UTF-8.
  const absl::Status status =
      ParseCompletionRequest("{\"prompt\": \"\xff\xfe", false).status();
  ASSERT_FALSE(status.ok());
  const json error = ParseErrorBody(ErrorBody(status));
  EXPECT_TRUE(
      absl::StartsWith(error["message"].get<std::string>(), "invalid JSON: "));
}

TEST(OpenAiApiTest, ErrorBodyOfEmptyMessageNamesTheCode) {
  const json error = ParseErrorBody(
      ErrorBody(absl::Status(absl::StatusCode::kUnavailable, "")));
  EXPECT_EQ(error["message"], "UNAVAILABLE");
}

TEST(OpenAiApiTest, ContextLengthExceededHasItsCode) {
  const absl::Status status = ContextLengthExceeded(200, 350, 256, 512);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpStatusFor(status.code()), 400);
  const json error = ParseErrorBody(ErrorBody(status, "prompt"));
  EXPECT_EQ(error["code"], "context_length_exceeded");
  EXPECT_EQ(error["type"], "invalid_request_error");
  EXPECT_EQ(error["param"], "prompt");
  const std::string message = error["message"];
  EXPECT_TRUE(absl::StrContains(message, "maximum context length is 512"))
      << message;
  EXPECT_TRUE(absl::StrContains(message, "550")) << message;
}

// A prompt over the prompt limit is named against that limit, not the
// context.
TEST(OpenAiApiTest, APromptOverThePromptLimitIsCalledThat) {
  const std::string message(ContextLengthExceeded(300, 8, 256, 512).message());
  EXPECT_TRUE(absl::StrContains(message, "maximum prompt length is 256"))
      << message;
  EXPECT_TRUE(absl::StrContains(message, "your prompt has 300")) << message;
  EXPECT_FALSE(absl::StrContains(message, "context")) << message;
}

// A number past double's range is a 400 naming the JSON, not a 500.
TEST(OpenAiApiTest, NumberOverflowIsInvalidJson) {
  auto req =
      ParseCompletionRequest(R"({"prompt":"x","max_tokens":1e400})", false);
  ASSERT_FALSE(req.ok());
  EXPECT_EQ(req.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(req.status().message(), "invalid JSON"))
      << req.status();
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

std::pair<std::string, bool> Stopped(std::string text) {
  return {std::move(text), true};
}

// Feeds `pieces` and returns everything emitted (plus Flush() if no stop).
std::pair<std::string, bool> FeedAll(std::vector<std::string> stops,
                                     const std::vector<std::string>& pieces) {
  StopMatcher matcher(std::move(stops));
  std::string out;
  for (const std::string& piece : pieces) {
    const StopMatcher::Emit emit = matcher.Feed(piece);
    out += emit.text;
    if (emit.stopped) return {out, true};
  }
  return {out + matcher.Flush(), false};
}

TEST(StopMatcherTest, NoStopsPassesEverythingThrough) {
  StopMatcher matcher({});
  const StopMatcher::Emit emit = matcher.Feed("hello");
  EXPECT_EQ(emit.text, "hello");
  EXPECT_FALSE(emit.stopped);
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, StopsWithinOneFeed) {
  StopMatcher matcher({"END"});
  const StopMatcher::Emit emit = matcher.Feed("abcENDxyz");
  EXPECT_EQ(emit.text, "abc");
  EXPECT_TRUE(emit.stopped);
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(matcher.Feed("more").text, "");
  EXPECT_TRUE(matcher.Feed("more").stopped);
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, HoldsBackAPossibleStopSplitAcrossFeeds) {
  StopMatcher matcher({"END"});
  StopMatcher::Emit emit = matcher.Feed("abcE");
  EXPECT_EQ(emit.text, "abc");
  EXPECT_FALSE(emit.stopped);
  emit = matcher.Feed("N");
  EXPECT_EQ(emit.text, "");
  emit = matcher.Feed("Dxyz");
  EXPECT_EQ(emit.text, "");
  EXPECT_TRUE(emit.stopped);
}

TEST(StopMatcherTest, ReleasesHeldTextWhenItStopsLookingLikeAStop) {
  StopMatcher matcher({"END"});
  EXPECT_EQ(matcher.Feed("abEN").text, "ab");
  EXPECT_EQ(matcher.Feed("x").text, "ENx");
  EXPECT_EQ(matcher.Feed("E").text, "");
  EXPECT_EQ(matcher.Flush(), "E");
}

TEST(StopMatcherTest, OverlappingPrefixRestartsTheMatch) {
  // "aab" holds "aa"; the stop "ab" begins at the second 'a'.
  StopMatcher matcher({"ab"});
  EXPECT_EQ(matcher.Feed("xa").text, "x");
  StopMatcher::Emit emit = matcher.Feed("a");
  EXPECT_EQ(emit.text, "a");
  EXPECT_FALSE(emit.stopped);
  emit = matcher.Feed("b");
  EXPECT_EQ(emit.text, "");
  EXPECT_TRUE(emit.stopped);
  EXPECT_EQ(FeedAll({"abab"}, {"aba", "bab"}), Stopped(""));
  EXPECT_EQ(FeedAll({"abac"}, {"ababa", "c"}), Stopped("ab"));
}

TEST(StopMatcherTest, HoldsBackTheLongestPrefixOfAnyStop) {
  StopMatcher matcher({"xyz", "yzw"});
  EXPECT_EQ(matcher.Feed("ayz").text, "a");  // "yz" could become "yzw"
  EXPECT_EQ(matcher.Flush(), "yz");
}

TEST(StopMatcherTest, FirstEndingStopWins) {
  // "bc" ends before "abcd" would.
  EXPECT_EQ(FeedAll({"abcd", "bc"}, {"xabcd"}), Stopped("xa"));
  // Both end at the same byte: the earlier start wins.
  EXPECT_EQ(FeedAll({"c", "bc"}, {"abcd"}), Stopped("a"));
}

TEST(StopMatcherTest, ResultDoesNotDependOnHowTextIsSplit) {
  const std::vector<std::string> stops = {"\n\n", "abab", "ba", "END"};
  for (const std::string text :
       {"xxababyy", "a\nb\n\nc", "aaEN\nEND", "bbbbb", "abaab", "EN", ""}) {
    const auto whole = FeedAll(stops, {text});
    std::vector<std::string> bytes;
    for (char c : text) bytes.push_back(std::string(1, c));
    EXPECT_EQ(FeedAll(stops, bytes), whole) << text;
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      EXPECT_EQ(FeedAll(stops, {text.substr(0, cut), text.substr(cut)}), whole)
          << text << " cut at " << cut;
    }
  }
}

}  // namespace
}  // namespace kvcanary::engine
