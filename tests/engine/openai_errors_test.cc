// OpenAI API errors: HTTP statuses, error bodies and the errors worded as
// OpenAI's (engine/nodes/openai_errors.h).
#include "engine/nodes/openai_errors.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/nodes/openai_request.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {
namespace {

using json = nlohmann::json;

TEST(OpenAiApiTest, HttpStatusForMapsEveryCode) {
  using C = absl::StatusCode;
  EXPECT_EQ(HttpStatusFor(C::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(C::kOutOfRange), 400);
  EXPECT_EQ(HttpStatusFor(C::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusFor(C::kPermissionDenied), 403);
  EXPECT_EQ(HttpStatusFor(C::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(C::kAlreadyExists), 409);
  EXPECT_EQ(HttpStatusFor(C::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFor(C::kDataLoss), 502);
  EXPECT_EQ(HttpStatusFor(C::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(C::kDeadlineExceeded), 504);
  for (C c : {C::kInternal, C::kUnknown, C::kAborted, C::kCancelled,
              C::kFailedPrecondition, C::kUnimplemented}) {
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
  const absl::Status status =
      ParseCompletionRequest(R"({"prompt":"hi","max_tokens":"ten"})", false)
          .status();
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

}  // namespace
}  // namespace kvcanary::engine
