// The OpenAI API's errors: the HTTP status of a failed request, its error
// body, what the access log records as its reason, and the errors worded
// as OpenAI's (model_not_found, context_length_exceeded). No I/O.
#ifndef KVCANARY_ENGINE_NODES_OPENAI_ERRORS_H_
#define KVCANARY_ENGINE_NODES_OPENAI_ERRORS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/json_strict.h"

namespace kvcanary::engine {

// Payload type URLs under which statuses carry the OpenAI error "code" and
// "param" fields to ErrorBody().
inline constexpr absl::string_view kOpenAiCodeUrl = "kvcanary/openai-code";
// (kOpenAiParamUrl is the URL common/json_strict.h puts a duplicate key's
// path under.)
inline constexpr absl::string_view kOpenAiParamUrl = kJsonParamUrl;

// The HTTP status for a failed request: kInvalidArgument/kOutOfRange 400,
// kUnauthenticated 401, kPermissionDenied 403, kNotFound 404,
// kAlreadyExists 409 (a decode node's answer to a request id it ran
// already), kResourceExhausted 429, kUnavailable 503, kDeadlineExceeded 504,
// kDataLoss 502 (a prefill or decode node sent corrupt data, e.g. a KV page
// failing its CRC: the fault is upstream of the router, which is acting as a
// gateway, not the client's and not the router's own), others 500.
int HttpStatusFor(absl::StatusCode code);

// The OpenAI error body for `status` (REQUIRES: !status.ok()):
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// "type" follows the HTTP status: invalid_request_error (400, 404),
// authentication_error (401), permission_error (403), rate_limit_error
// (429), server_error (5xx). "param" is `param` if non-empty, else the
// status's kOpenAiParamUrl payload, else null; "code" is the kOpenAiCodeUrl
// payload or null.
std::string ErrorBody(const absl::Status& status, absl::string_view param = "");

// What an access log records as the reason of a failed request: the
// status's kOpenAiCodeUrl payload if it has one (e.g.
// "context_length_exceeded"), else the OpenAI error type of its HTTP status
// ("authentication_error", "rate_limit_error", ...). Never the message,
// which may quote the request. REQUIRES: !status.ok().
std::string ErrorReason(const absl::Status& status);

// kNotFound with code "model_not_found", worded as OpenAI's (the router
// serves one model; a request naming another is a 404, not served anyway).
absl::Status ModelNotFound(absl::string_view model);

// kInvalidArgument with code "context_length_exceeded", worded as OpenAI's:
// a prompt over `prompt_limit` is named against the prompt limit; one
// within it whose completion does not fit, against `context_tokens`.
absl::Status ContextLengthExceeded(int prompt_tokens, int max_tokens,
                                   int prompt_limit, int context_tokens);

// The same error for a prompt refused before it is tokenized: `prompt_bytes`
// bytes are at least `min_tokens` tokens, more than `prompt_limit`.
absl::Status PromptBytesExceedLimit(size_t prompt_bytes, int64_t min_tokens,
                                    int prompt_limit);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_OPENAI_ERRORS_H_
