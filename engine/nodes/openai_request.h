// The OpenAI API's requests: a POST /v1/completions or
// /v1/chat/completions body parsed and validated into a CompletionRequest,
// with the limits it is held to. No I/O; docs/api.md is the user-facing
// description.
//
// Everything here takes untrusted input and returns absl::Status; nothing
// throws (nlohmann::json exceptions are caught inside the .cc).
#ifndef KVCANARY_ENGINE_NODES_OPENAI_REQUEST_H_
#define KVCANARY_ENGINE_NODES_OPENAI_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvcanary::engine {

inline constexpr int kMaxMaxTokens = 1 << 20;
inline constexpr int kMaxStopStrings = 4;
// The most choices (`n`) one request may ask for: each is a sequence of its
// own, counted against the in-flight limits as a request.
inline constexpr int kMaxChoices = 8;

// How a chat request's messages become the prompt (--chat-template).
enum class ChatTemplate {
  // The contents joined by "\n", in order; roles are validated but not
  // rendered (the engine's behaviour before templates).
  kPlain,
  // As real chat templates do: a constant header (kKvcanaryChatHeader, at
  // least 16 tokens on any tokenizer the engine loads) before the
  // messages, each message as "<|role|>\n<content>\n<|end|>\n", and
  // "<|assistant|>\n" last (docs/api.md, "Chat templates").
  kKvcanary,
};
inline constexpr char kKvcanaryChatHeader[] =
    "<|system|>\nYou are kvcanary's test model. Read the conversation below "
    "and answer the last message from the user.\n<|end|>\n";
// "plain" or "kvcanary"; kInvalidArgument naming the choices.
absl::StatusOr<ChatTemplate> ParseChatTemplate(absl::string_view name);
const char* ChatTemplateName(ChatTemplate t);  // "plain", "kvcanary"

struct CompletionRequest {
  bool chat = false;  // POST /v1/chat/completions rather than /v1/completions
  std::string model;  // "" if the client sent none (the router's default)
  // For chat: the messages rendered by the ChatTemplate parsed with.
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
// without logprobs: true. The status carries the offending field as its
// "param" payload (see ErrorBody, openai_errors.h). Unknown fields are
// ignored; a known field set to null counts as absent.
// Chat messages are rendered into `prompt` by `chat_template`.
absl::StatusOr<CompletionRequest> ParseCompletionRequest(
    absl::string_view body, bool chat,
    ChatTemplate chat_template = ChatTemplate::kPlain);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_OPENAI_REQUEST_H_
