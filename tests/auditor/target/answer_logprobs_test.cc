// Log-probabilities as each server shapes them (docs/targets.md,
// "Log-probabilities, per server"), read into one form: OpenAI's and
// vLLM's legacy completions object (echo's null first figure included),
// chat's content list, llama.cpp's chat-shaped completions, stream chunks
// added up, and a shape nobody sends named as malformed.
#include "auditor/target/answer_logprobs.h"

#include "auditor/target/completion.h"
#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;

ProbeResponse Response(std::string body) {
  ProbeResponse r;
  r.status = 200;
  r.body = std::move(body);
  return r;
}

TEST(AnswerLogprobsTest, LegacyCompletionsWithEchosNullFirstFigure) {
  const Completion c =
      ParseCompletion(Response(R"({"choices":[{"text":"The step","logprobs":{
        "text_offset":[0,3],"token_logprobs":[null,-8.81],
        "tokens":["The"," step"],
        "top_logprobs":[null,{" step":-8.81," is":-0.78}]}}]})"),
                      false);
  ASSERT_TRUE(c.usable) << c.error;
  ASSERT_TRUE(c.logprobs.present);
  EXPECT_TRUE(c.logprobs.malformed.empty()) << c.logprobs.malformed;
  ASSERT_EQ(c.logprobs.positions.size(), 2u);
  EXPECT_FALSE(c.logprobs.positions[0].logprob.has_value());
  EXPECT_TRUE(c.logprobs.positions[0].top.empty());
  EXPECT_EQ(c.logprobs.positions[1].token, " step");
  EXPECT_EQ(*c.logprobs.positions[1].logprob, -8.81);
  EXPECT_EQ(c.logprobs.positions[1].top.size(), 2u);
}

TEST(AnswerLogprobsTest, ChatContentAndLlamaCppsCompletionsReadAlike) {
  const std::string content =
      R"({"content":[{"id":5,"token":"Hi","bytes":[72,105],"logprob":-0.5,)"
      R"("top_logprobs":[{"id":5,"token":"Hi","logprob":-0.5},)"
      R"({"id":9,"token":"Yo","logprob":-3.4028234663852886e38}]}]})";
  const Completion chat = ParseCompletion(
      Response(R"({"choices":[{"message":{"content":"Hi"},"logprobs":)" +
               content + "}]}"),
      false);
  const Completion llama = ParseCompletion(
      Response(R"({"choices":[{"text":"Hi","logprobs":)" + content + "}]}"),
      false);
  for (const Completion* c : {&chat, &llama}) {
    ASSERT_TRUE(c->usable) << c->error;
    ASSERT_EQ(c->logprobs.positions.size(), 1u);
    EXPECT_EQ(*c->logprobs.positions[0].logprob, -0.5);
    ASSERT_EQ(c->logprobs.positions[0].top.size(), 2u);
    EXPECT_EQ(c->logprobs.positions[0].top[1].first, "Yo");
  }
  EXPECT_EQ(chat.logprobs.positions, llama.logprobs.positions);
}

TEST(AnswerLogprobsTest, StreamChunksAddUpAndNullMeansNone) {
  const Completion c = ParseCompletion(
      Response(
          "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"},"
          "\"logprobs\":null}]}\n\n"
          "data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"logprobs\":"
          "{\"content\":[{\"token\":\"a\",\"logprob\":-1,\"top_logprobs\":"
          "[]}]}}]}\n\n"
          "data: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"logprobs\":"
          "{\"content\":[{\"token\":\"b\",\"logprob\":-2,\"top_logprobs\":"
          "[]}]}}]}\n\n"
          "data: [DONE]\n\n"),
      true);
  ASSERT_TRUE(c.usable) << c.error;
  ASSERT_EQ(c.logprobs.positions.size(), 2u);
  EXPECT_EQ(c.logprobs.positions[1].token, "b");
  const Completion none = ParseCompletion(
      Response(R"({"choices":[{"text":"x","logprobs":null}]})"), false);
  EXPECT_FALSE(none.logprobs.present);
}

TEST(AnswerLogprobsTest, AnUnknownShapeIsMalformedWithoutItsKeys) {
  const Completion c = ParseCompletion(
      Response(R"({"choices":[{"text":"x","logprobs":{"secret words":-1}}]})"),
      false);
  ASSERT_TRUE(c.logprobs.present);
  EXPECT_FALSE(c.logprobs.malformed.empty());
  EXPECT_EQ(c.logprobs.malformed.find("secret"), std::string::npos);
  const Completion figure = ParseCompletion(
      Response(R"({"choices":[{"text":"x","logprobs":{"tokens":["x"],)"
               R"("token_logprobs":["-1"]}}]})"),
      false);
  EXPECT_FALSE(figure.logprobs.malformed.empty());
}

}  // namespace
}  // namespace kvcanary::auditor
