// Log-probabilities as the OpenAI API shapes them (docs/api.md,
// "Log-probabilities"): the legacy completions object {tokens,
// token_logprobs, top_logprobs, text_offset} and chat's {content: [{token,
// logprob, bytes, top_logprobs}], refusal}. No I/O.
#ifndef KVCANARY_ENGINE_NODES_OPENAI_LOGPROBS_H_
#define KVCANARY_ENGINE_NODES_OPENAI_LOGPROBS_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace kvcanary::engine {

// One position as the client sees it: the token's text, its
// log-probability, and the top alternatives (most likely first). No
// logprob (and no alternatives) where the engine did not return one: a
// first token installed without its prefill node's answer.
struct LogprobEntry {
  std::string token;
  std::optional<float> logprob;
  std::vector<std::pair<std::string, float>> top;
};

// The completions object for `entries`, whose texts start at byte
// `text_offset` of the choice's text. top_logprobs[i] maps each
// alternative's text to its logprob (the first, most likely, where two
// alternatives read the same), plus the token itself (vLLM's shape: up to
// k + 1 keys); null where the entry has no logprob.
nlohmann::ordered_json CompletionLogprobsJson(
    const std::vector<LogprobEntry>& entries, size_t text_offset);

// Chat's object: {"content": [...], "refusal": null}; `bytes` is each
// text's UTF-8 bytes. top_logprobs holds exactly the alternatives asked
// for.
nlohmann::ordered_json ChatLogprobsJson(
    const std::vector<LogprobEntry>& entries);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_OPENAI_LOGPROBS_H_
