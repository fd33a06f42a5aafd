// The OpenAI API's answers: the completion response, the stream's
// server-sent events, the GET /v1/models list and the GET /version body,
// and the header naming the request. No I/O; the router owns the sockets.
#ifndef KVCANARY_ENGINE_NODES_OPENAI_RESPONSES_H_
#define KVCANARY_ENGINE_NODES_OPENAI_RESPONSES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/nodes/openai_logprobs.h"

namespace kvcanary::engine {

// The response header carrying the router's request id (decimal), on every
// completion response once the request has an id: the number in the body's
// "cmpl-<id>" / "chatcmpl-<id>" and the `request` of its trace events.
inline constexpr char kRequestIdHeader[] = "X-Kvcanary-Request-Id";

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
  // The first KV tier in tokens (the prefill nodes' page pool:
  // num_pages x page_tokens); 0: not reported.
  int kv_cache_tokens = 0;
  std::string free_list;     // lifo | fifo | mixed; "": not reported
  std::string numerics;      // invariant | variant | mixed; "": not reported
  std::string kv_checksum;   // crc32c
  std::string trace_format;  // kvt2
  int max_model_len = 0;
  int max_prompt_tokens = 0;
  int page_tokens = 0;
};
// {"engine": "kvcanary", "version", "disaggregated": true, "kv_checksum",
//  "watermark", "prefix_cache", "trace_format", "max_model_len",
//  "max_prompt_tokens", "page_tokens", "kv_cache_tokens", "host_tier_pages",
//  "tenant_header" (null without one)}, and "free_list", "cache_salt" and
//  "numerics" when known
std::string VersionJson(const VersionInfo& info);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_OPENAI_RESPONSES_H_
