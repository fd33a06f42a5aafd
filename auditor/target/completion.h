// What an OpenAI-style completion probe got back: the text, the reported
// prompt tokens, the ids and the timings, from a plain JSON body or an SSE
// stream — and errors wherever a server puts them: an HTTP status, an
// `{"error": ...}` body, or an error event inside a stream that began with
// HTTP 200 (docs/targets.md lists which servers do which).
#ifndef KVCANARY_AUDITOR_TARGET_COMPLETION_H_
#define KVCANARY_AUDITOR_TARGET_COMPLETION_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "auditor/target/answer_logprobs.h"
#include "auditor/target/multi_client.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// The response header in which kvcanary's router reports the engine's own
// request id (the `request` of its trace events).
inline constexpr absl::string_view kEngineRequestIdHeader =
    "x-kvcanary-request-id";

// Where Completion::cached_tokens came from (docs/targets.md, "Cached
// tokens").
enum class CachedTokensFrom {
  kNone,  // not reported: never read as 0
  // usage.prompt_tokens_details.cached_tokens: vLLM (with
  // --enable-prompt-tokens-details), SGLang (--enable-cache-report, only
  // when > 0), OpenAI, llama.cpp builds with usage_json_oaicompat.
  kPromptTokensDetails,
  // usage.prompt_tokens - timings.prompt_n: llama.cpp's server, whose
  // `timings.prompt_n` counts the prompt tokens it evaluated (the rest came
  // from its slot's cache) and whose older builds send no
  // prompt_tokens_details.
  kTimings,
};
// "usage.prompt_tokens_details.cached_tokens", "timings.prompt_n" or
// "not reported".
const char* CachedTokensFromName(CachedTokensFrom from);

// What a completion probe got back.
struct Completion {
  // The HTTP status; for an error reported inside a 200 body or stream, the
  // error's own status (its numeric `code`, else its `type` mapped, see
  // ErrorObjectStatus), so a refusal reads as a refusal.
  int status = 0;
  bool http_ok_error = false;  // HTTP 200, but the body or stream was an error
  bool usable = false;         // a 200 with a well-formed completion
  // A 200 stream that ended without an answer: cut before [DONE], or
  // [DONE] with no chunk holding a choice (TGI's chat stream drops an
  // error so). Never an answer: not usable, never judged by boundary.
  bool dropped_stream = false;
  std::string text;
  // The choices' log-probabilities, where the probe asked for them and the
  // target sent some (stream chunks put together).
  AnswerLogprobs logprobs;
  int prompt_tokens = -1;  // usage.prompt_tokens; -1: not reported
  // usage.completion_tokens (llama.cpp's own shape: tokens_predicted); -1:
  // not reported.
  int completion_tokens = -1;
  // Prompt tokens served from the target's cache, however it reports them
  // (cached_from), beyond those every request shares (shared_head_tokens,
  // subtracted by Target::Parse); -1: not reported.
  int cached_tokens = -1;
  // The target's shared head (Target::shared_head_tokens()) when it was
  // subtracted from cached_tokens; 0: none.
  int shared_head_tokens = 0;
  CachedTokensFrom cached_from = CachedTokensFrom::kNone;
  int evaluated_tokens = -1;  // llama.cpp's timings.prompt_n; -1: none
  // The answer came in llama.cpp's own pre-OpenAI shape (`content`,
  // `tokens_evaluated`, `stop`, `timings`), as its /v1/completions answered
  // before it adopted OpenAI's (docs/targets.md).
  bool legacy_shape = false;
  std::string response_id;      // the body's "id" ("" if none)
  uint64_t engine_request = 0;  // kEngineRequestIdHeader; 0: not reported
  // The answer's Retry-After header (rate_limit.h's ParseRetryAfter).
  std::optional<absl::Duration> retry_after;
  double ttft_ms = 0;
  double total_ms = 0;
  absl::Status error;  // transport error, or why the answer is not usable
  // The auditor hung up on purpose before the answer ended
  // (ProbeRequest::hang_up_after): no answer, and no sign of a target down.
  bool hung_up = false;
  // Not sent: the command's token budget was spent (SpendLedger); error
  // says so. No answer, and no sign of a target down.
  bool not_sent = false;
};

// A target's way of saying a prompt is too long: 400, 413 or 422 (also
// when it came inside a 200 stream: Completion::status is then the error's).
inline bool IsRefusal(int status) {
  return status == 400 || status == 413 || status == 422;
}

// Parses `r` (`stream`: an SSE stream that must end with [DONE]). Cached
// tokens from usage.prompt_tokens_details.cached_tokens where present, else
// usage.prompt_tokens - timings.prompt_n where both are (in any chunk). A 200
// without a completion (or a stream without [DONE]) is not usable, with the
// reason. An error object in a 200 answer — a body `{"error": ...}`, a
// stream line `error: {...}`, an `event: error` event, or a `data:` chunk
// holding an `error` — makes the completion an error with that status.
Completion ParseCompletion(const ProbeResponse& r, bool stream);

// The HTTP status an error object stands for: its numeric `code` if that is
// 400..599, else its `type` / `error_type` mapped (invalid request,
// context length -> 400; validation -> 422 (TGI); authentication -> 401;
// permission ->
// 403; not found -> 404; rate limit, overloaded -> 429; anything else ->
// 500). `error` may be an object, or a string (500, unless a sibling
// `error_type` or `code` says more: pass the enclosing object as `outer`).
int ErrorObjectStatus(const nlohmann::json& error,
                      const nlohmann::json& outer = nlohmann::json());

// hung_up (the auditor's own hang-up), not_sent (the budget), ok,
// dropped_stream (a 200 stream without an answer), bad_response (any other 200
// without one), rate_limited (429, or 503 with a Retry-After: rate_limit.h),
// http_4xx, http_5xx or transport_error.
std::string Outcome(const Completion& c);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TARGET_COMPLETION_H_
