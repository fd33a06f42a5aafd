// Errors through the router as a client sees them: an unknown model is the
// documented 404, a number past double's range a 400 in the OpenAI shape
// (not a 500 with an empty body), "Bearer" with no key a missing key, and a
// prompt over the prompt limit named against the prompt limit.
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

class ApiErrorsTest : public SharedClusterTest {};

TEST_F(ApiErrorsTest, AnUnknownModelIs404AndTheServedOneIsServed) {
  HttpResult models = Get(cluster_->router(), "/v1/models", "sk-acme");
  ASSERT_EQ(models.status, 200) << models.body;
  const std::string served = models.json["data"][0]["id"];
  HttpResult ok = Post(
      cluster_->router(), "/v1/completions",
      nlohmann::json{{"model", served}, {"prompt", "Once"}, {"max_tokens", 1}}
          .dump(),
      "sk-acme");
  EXPECT_EQ(ok.status, 200) << ok.body;
  HttpResult unknown =
      Post(cluster_->router(), "/v1/completions",
           nlohmann::json{
               {"model", "gpt-none"}, {"prompt", "Once"}, {"max_tokens", 1}}
               .dump(),
           "sk-acme");
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  EXPECT_EQ(unknown.json["error"]["code"], "model_not_found") << unknown.body;
}

TEST_F(ApiErrorsTest, ANumberPastDoublesRangeIsA400InTheOpenAiShape) {
  HttpResult r = Post(cluster_->router(), "/v1/completions",
                      R"({"prompt": "Once", "max_tokens": 1e400})", "sk-acme");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json["error"]["type"], "invalid_request_error") << r.body;
}

TEST_F(ApiErrorsTest, BearerWithoutAKeyIsAMissingKey) {
  httplib::Client client(cluster_->router());
  auto res =
      client.Post("/v1/completions", {{"Authorization", "Bearer "}},
                  R"({"prompt": "Once", "max_tokens": 1})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_NE(res->body.find("missing API key"), std::string::npos) << res->body;
}

TEST_F(ApiErrorsTest, APromptOverThePromptLimitIsCalledThePromptLimit) {
  std::string prompt;
  for (int i = 0; i < 400; ++i) prompt += " once";
  HttpResult r = Post(
      cluster_->router(), "/v1/completions",
      nlohmann::json{{"prompt", prompt}, {"max_tokens", 1}}.dump(), "sk-acme");
  ASSERT_EQ(r.status, 400) << r.body;
  const std::string message = r.json["error"]["message"];
  EXPECT_NE(message.find("maximum prompt length"), std::string::npos)
      << message;
}

// A prompt of most of a mebibyte is refused from its size alone, before it
// is tokenized, with the same error and code.
TEST_F(ApiErrorsTest, APromptTooLongForAnyTokenizationIsRefusedBeforeIt) {
  const std::string prompt(900 << 10, 'a');
  HttpResult r = Post(
      cluster_->router(), "/v1/completions",
      nlohmann::json{{"prompt", prompt}, {"max_tokens", 1}}.dump(), "sk-acme");
  ASSERT_EQ(r.status, 400) << r.body.substr(0, 200);
  EXPECT_EQ(r.json["error"]["code"], "context_length_exceeded") << r.body;
  const std::string message = r.json["error"]["message"];
  EXPECT_NE(message.find("921600 bytes has at least"), std::string::npos)
      << message;
  EXPECT_NE(message.find("maximum prompt length"), std::string::npos)
      << message;
}

// A body over 1 MiB is a 413 in the OpenAI shape, and the router goes on
// serving.
TEST_F(ApiErrorsTest, ABodyOverOneMebibyteIs413) {
  const std::string prompt(2 << 20, 'a');
  HttpResult r = Post(
      cluster_->router(), "/v1/completions",
      nlohmann::json{{"prompt", prompt}, {"max_tokens", 1}}.dump(), "sk-acme");
  EXPECT_EQ(r.status, 413) << r.body.substr(0, 200);
  EXPECT_EQ(r.json["error"]["type"], "invalid_request_error") << r.body;
  EXPECT_NE(r.body.find("too large"), std::string::npos) << r.body;
  HttpResult ok = Post(cluster_->router(), "/v1/completions",
                       R"({"prompt": "Once", "max_tokens": 1})", "sk-acme");
  EXPECT_EQ(ok.status, 200) << ok.body;
}

// A path nobody serves is a 404 in the OpenAI shape.
TEST_F(ApiErrorsTest, AnUnknownPathIsA404InTheOpenAiShape) {
  HttpResult r = Get(cluster_->router(), "/v1/nothing-here", "sk-acme");
  EXPECT_EQ(r.status, 404);
  EXPECT_TRUE(r.json.contains("error")) << r.body;
}

}  // namespace
}  // namespace kvcanary::testing
