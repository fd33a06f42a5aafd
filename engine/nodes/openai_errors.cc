// The OpenAI API's errors: HTTP statuses by absl code, the error body and
// type, the access log's reason, and the errors worded as OpenAI's.
#include "engine/nodes/openai_errors.h"

#include <cstdint>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "engine/nodes/openai_internal.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {
namespace {

// Output keeps insertion order, so bodies read like OpenAI's.
using ordered_json = nlohmann::ordered_json;
using openai_internal::Dump;

const char* ErrorType(int http_status) {
  switch (http_status) {
    case 400:
    case 404:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 429:
      return "rate_limit_error";
    default:
      return "server_error";
  }
}

}  // namespace

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kDataLoss:
      return 502;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string ErrorBody(const absl::Status& status, absl::string_view param) {
  CHECK(!status.ok()) << "ErrorBody of an OK status";
  std::string message(status.message());
  if (message.empty()) message = absl::StatusCodeToString(status.code());
  ordered_json param_json = nullptr;
  if (!param.empty()) {
    param_json = std::string(param);
  } else if (auto p = status.GetPayload(kOpenAiParamUrl)) {
    param_json = std::string(*p);
  }
  ordered_json code_json = nullptr;
  if (auto c = status.GetPayload(kOpenAiCodeUrl)) code_json = std::string(*c);
  const ordered_json body = {
      {"error",
       {{"message", message},
        {"type", ErrorType(HttpStatusFor(status.code()))},
        {"param", param_json},
        {"code", code_json}}}};
  return Dump(body);
}

std::string ErrorReason(const absl::Status& status) {
  CHECK(!status.ok()) << "ErrorReason of an OK status";
  if (auto c = status.GetPayload(kOpenAiCodeUrl)) return std::string(*c);
  return ErrorType(HttpStatusFor(status.code()));
}

absl::Status ModelNotFound(absl::string_view model) {
  absl::Status status = absl::NotFoundError(
      absl::StrCat("The model `", model, "` does not exist."));
  status.SetPayload(kOpenAiCodeUrl, absl::Cord("model_not_found"));
  return status;
}

absl::Status ContextLengthExceeded(int prompt_tokens, int max_tokens,
                                   int prompt_limit, int context_tokens) {
  const int64_t requested = static_cast<int64_t>(prompt_tokens) + max_tokens;
  absl::Status status = absl::InvalidArgumentError(
      prompt_tokens > prompt_limit
          ? absl::StrCat("This model's maximum prompt length is ", prompt_limit,
                         " tokens, however your prompt has ", prompt_tokens,
                         " tokens. Please reduce your prompt.")
          : absl::StrCat("This model's maximum context length is ",
                         context_tokens, " tokens, however you requested ",
                         requested, " tokens (", prompt_tokens,
                         " in your prompt; ", max_tokens,
                         " for the completion). Please reduce your prompt; "
                         "or completion length."));
  status.SetPayload(kOpenAiCodeUrl, absl::Cord("context_length_exceeded"));
  return status;
}

absl::Status PromptBytesExceedLimit(size_t prompt_bytes, int64_t min_tokens,
                                    int prompt_limit) {
  absl::Status status = absl::InvalidArgumentError(absl::StrCat(
      "This model's maximum prompt length is ", prompt_limit,
      " tokens, however your prompt of ", prompt_bytes, " bytes has at least ",
      min_tokens, " tokens. Please reduce your prompt."));
  status.SetPayload(kOpenAiCodeUrl, absl::Cord("context_length_exceeded"));
  return status;
}

}  // namespace kvcanary::engine
