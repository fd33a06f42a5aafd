// The OpenAI-compatible HTTP API as data: request parsing and validation,
// response, streaming and error bodies, and stop-string matching. No I/O;
// the router owns the sockets. docs/api.md is the user-facing description.
//
// Everything here takes untrusted input and returns absl::Status; nothing
// throws (nlohmann::json exceptions are caught inside the .cc).
#ifndef KVCANARY_ENGINE_NODES_OPENAI_API_H_
#define KVCANARY_ENGINE_NODES_OPENAI_API_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/json_strict.h"
#include "engine/nodes/openai_logprobs.h"

namespace kvcanary::engine {

// Payload type URLs under which statuses carry the OpenAI error "code" and
// "param" fields to ErrorBody().
inline constexpr absl::string_view kOpenAiCodeUrl = "kvcanary/openai-code";
// (kOpenAiParamUrl is the URL common/json_strict.h puts a duplicate key's
// path under.)
inline constexpr absl::string_view kOpenAiParamUrl = kJsonParamUrl;

// The response header carrying the router's request id (decimal), on every
// completion response once the request has an id: the number in the body's
// "cmpl-<id>" / "chatcmpl-<id>" and the `request` of its trace events.
inline constexpr char kRequestIdHeader[] = "X-Kvcanary-Request-Id";

inline constexpr int kMaxMaxTokens = 1 << 20;
inline constexpr int kMaxStopStrings = 4;
// The most choices (`n`) one request may ask for: each is a sequence of its
// own, counted against the in-flight limits as a request.
inline constexpr int kMaxChoices = 8;

struct CompletionRequest {
  bool chat = false;  // POST /v1/chat/completions rather than /v1/completions
  std::string model;  // "" if the client sent none (the router's default)
  // For chat: the message contents joined by "\n", in order (roles are
  // validated but not rendered).
  std::string prompt;
  int max_tokens = 16;       // [1, kMaxMaxTokens]
  float temperature = 1.0f;  // [0, 2]; 0 = greedy
  float top_p = 1.0f;        // (0, 1]
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;  // up to kMaxStopStrings, none empty
  bool stream = false;
  // stream_options.include_usage. The final chunk of a stream carries usage
  // whether or not it is set (docs/api.md); parsed so a wrong type is a 400.
  bool include_usage = false;
  // "cache_salt" (vLLM's and SGLang's field): mixed into the prefix cache's
  // keys as the nodes' --cache-salt says; "" if absent. A non-empty string
  // of at most kMaxCacheSaltBytes bytes without control characters.
  std::string cache_salt;
  // Log-probabilities of each generated token with this many top
  // alternatives ([0, kMaxTopLogprobs]); -1: none. Completions: the
  // integer `logprobs`; chat: `logprobs: true` with `top_logprobs` (0 if
  // absent).
  int logprobs = -1;
  // Completions' `echo`: the prompt's text before the completion's, and
  // with `logprobs`, its tokens' log-probabilities.
  bool echo = false;
  int n = 1;  // choices, [1, kMaxChoices]
};

// Parses a POST /v1/completions (`chat` false) or /v1/chat/completions body.
// kInvalidArgument for malformed JSON ("invalid JSON: ...": anything
// common/json_strict.h refuses, bytes after the value and duplicate keys
// included, a duplicate's path as "param"), a body that is not an object, a
// missing prompt/messages, a known field of the wrong type or out of range, or
// an unsupported feature (n != 1, best_of != 1, chat's echo, token-array or
// batched prompts), `logprobs` over kMaxTopLogprobs or chat's top_logprobs
// without logprobs: true. The status carries the offending field as its "param"
// payload (see ErrorBody). Unknown fields are ignored; a known field set to
// null counts as absent.
absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body,
                                                         bool chat);

// The HTTP status for a failed request: kInvalidArgument/kOutOfRange 400,
// kUnauthenticated 401, kPermissionDenied 403, kNotFound 404,
// kResourceExhausted 429, kUnavailable 503, kDeadlineExceeded 504, kDataLoss
// 502 (a prefill or decode node sent corrupt data, e.g. a KV page failing
// its CRC: the fault is upstream of the router, which is acting as a
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

struct CompletionResult {
  int index = 0;   // the choice's
  std::string id;  // "cmpl-..." or "chatcmpl-...", chosen by the router
  std::string model;
  int64_t created = 0;  // unix seconds
  // The whole text for CompletionResponseJson(); for StreamChunkSse() the
  // text emitted in earlier chunks, excluding the chunk's delta.
  std::string text;
  std::string finish_reason;  // "stop" | "length" | ...; "" = null
  int prompt_tokens = 0;
  int completion_tokens = 0;
  // Prompt tokens whose K/V came from the prefix cache of the node that
  // prefilled the prompt (0 when none).
  int cached_tokens = 0;
  // The request asked for log-probabilities: choices[0].logprobs is an
  // object (built from `logprobs`), not null.
  bool has_logprobs = false;
  // Every position returned (the echoed prompt's, then the generated
  // tokens'), for CompletionResponseJson(). A stream chunk's own are
  // passed to StreamChunkSse().
  std::vector<LogprobEntry> logprobs;
};

// The non-streaming response, one choice per result (REQUIRES: not
// empty; the envelope is the first's): "text_completion" with
// choices[i].text, or "chat.completion" with choices[i].message {role:
// assistant, content}; both with usage {prompt_tokens, completion_tokens,
// total_tokens, prompt_tokens_details: {cached_tokens}}: the prompt and its
// cached tokens counted once (the first choice's), the completion tokens of
// every choice.
std::string CompletionResponseJson(const std::vector<CompletionResult>& choices,
                                   bool chat);

// One server-sent event, "data: {json}\n\n", carrying `delta` for choice
// partial.index. Completions:
// a "text_completion" object with choices[0].text = delta. Chat: a
// "chat.completion.chunk" with choices[0].delta = {content: delta}, plus
// role "assistant" when partial.text is empty (the first chunk). A
// `final_chunk` carries choices[0].finish_reason, and usage (from `partial`)
// if `usage`; other chunks have finish_reason null and no usage. Chat final
// chunks with an empty delta have delta {} (plus role if first). With
// partial.has_logprobs, choices[0].logprobs holds `logprobs`, the chunk's own
// positions (completions: their text_offset counts from the start of
// partial.text).
std::string StreamChunkSse(const CompletionResult& partial,
                           absl::string_view delta, bool chat, bool final_chunk,
                           const std::vector<LogprobEntry>& logprobs = {},
                           bool usage = true);
// With n > 1 the choices' final chunks carry no usage; this last event
// does, with "choices": [] (OpenAI's shape), for all of `choices` as
// CompletionResponseJson counts them.
std::string StreamUsageSse(const std::vector<CompletionResult>& choices,
                           bool chat);
// The terminating event: "data: [DONE]\n\n".
std::string StreamDoneSse();

// GET /v1/models: a list holding the one served model, with its context
// (`max_model_len`, as vLLM names it) and the longest prompt admitted
// (`max_prompt_tokens`): the advertised limits an auditor probes.
std::string ModelsJson(absl::string_view model_id, int64_t created,
                       int max_model_len, int max_prompt_tokens);

// GET /version: what the engine is and the settings its nodes run with.
struct VersionInfo {
  std::string version;        // kEngineVersion
  std::string watermark;      // off | detect | enforce
  std::string prefix_cache;   // tenant | global | off
  std::string cache_salt;     // ignore | scoped | client; "": not reported
  std::string tenant_header;  // the router's --tenant-header; "": none
  int host_tier_pages = 0;
  std::string free_list;     // lifo | fifo | mixed; "": not reported
  std::string kv_checksum;   // crc32c
  std::string trace_format;  // kvt2
  int max_model_len = 0;
  int max_prompt_tokens = 0;
  int page_tokens = 0;
};
// {"engine": "kvcanary", "version", "disaggregated": true, "kv_checksum",
//  "watermark", "prefix_cache", "trace_format", "max_model_len",
//  "max_prompt_tokens", "page_tokens", "host_tier_pages", "tenant_header"
//  (null without one)}, and "free_list" and "cache_salt" when known
std::string VersionJson(const VersionInfo& info);

// Finds stop strings in text that arrives in pieces, so that no emitted text
// ever contains (the start of) a stop string. The result does not depend on
// how the text is split into Feed() calls: a stop is found where it first
// ends (the earliest-starting one if several end at the same byte), as if
// text were fed a byte at a time. Not thread-safe; one per request.
class StopMatcher {
 public:
  struct Emit {
    std::string text;  // safe to send to the client now
    bool stopped;      // a stop string matched; `text` ends just before it
  };

  // REQUIRES: no stop string is empty (CHECKed; ParseCompletionRequest
  // rejects them).
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends generated text. Holds back the longest suffix that is a proper
  // prefix of some stop string. After a stop matched, returns {"", true}.
  Emit Feed(absl::string_view text);
  // The held-back text, at the end of generation when no stop matched; ""
  // after a stop matched.
  std::string Flush();

  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // held back: a prefix of some stop string
  bool stopped_ = false;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_OPENAI_API_H_
