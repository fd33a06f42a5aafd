// Parsing and validation of OpenAI API requests
// (engine/nodes/openai_request.h).
#include "engine/nodes/openai_request.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/model/model.h"
#include "engine/model/tokenizer.h"
#include "engine/nodes/openai_errors.h"
#include "gtest/gtest.h"
#include "tests/engine/test_models.h"

namespace kvcanary::engine {
namespace {

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

// A number past double's range is a 400 naming the JSON, not a 500.
TEST(OpenAiApiTest, NumberOverflowIsInvalidJson) {
  auto req =
      ParseCompletionRequest(R"({"prompt":"x","max_tokens":1e400})", false);
  ASSERT_FALSE(req.ok());
  EXPECT_EQ(req.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(req.status().message(), "invalid JSON"))
      << req.status();
}

// --chat-template: plain joins the contents (today's behaviour); kvcanary
// wraps them as real templates do, a constant header first.
TEST(OpenAiApiTest, ChatTemplatesRenderTheMessages) {
  const std::string body =
      R"({"messages":[{"role":"system","content":"Be brief."},)"
      R"({"role":"user","content":"Hi"}]})";
  auto plain = ParseCompletionRequest(body, /*chat=*/true);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->prompt, "Be brief.\nHi");
  auto wrapped = ParseCompletionRequest(body, true, ChatTemplate::kKvcanary);
  ASSERT_TRUE(wrapped.ok()) << wrapped.status();
  EXPECT_EQ(wrapped->prompt,
            absl::StrCat(kKvcanaryChatHeader,
                         "<|system|>\nBe brief.\n<|end|>\n"
                         "<|user|>\nHi\n<|end|>\n<|assistant|>\n"));
  EXPECT_EQ(ParseChatTemplate("kvcanary").value(), ChatTemplate::kKvcanary);
  EXPECT_EQ(ParseChatTemplate("plain").value(), ChatTemplate::kPlain);
  EXPECT_FALSE(ParseChatTemplate("chatml").ok());
}

// The header is at least 16 tokens on both tokenizers the engine loads:
// the embedded model's and stories260K's tok512 (where present).
TEST(OpenAiApiTest, TheKvcanaryHeaderIsAtLeastSixteenTokens) {
  const Model embedded = DefaultModel();
  const Tokenizer t = Tokenizer::Default(embedded.config.vocab_size);
  EXPECT_GE(t.Encode(kKvcanaryChatHeader, /*bos=*/false, false).size(), 16u);
  if (const testing::RealModel* real = testing::Stories260K()) {
    EXPECT_GE(real->tokenizer.Encode(kKvcanaryChatHeader, false, false).size(),
              16u);
  }
}

}  // namespace
}  // namespace kvcanary::engine
