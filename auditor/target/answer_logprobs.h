// The log-probabilities an answer carried, in whichever shape its server
// sends them (docs/targets.md, "Log-probabilities, per server"): the
// legacy completions object {tokens, token_logprobs, top_logprobs (text ->
// logprob), text_offset} of OpenAI and vLLM; chat's {content: [{token,
// logprob, bytes, top_logprobs: [{token, logprob}]}]}, which llama.cpp's
// server also sends for completions. Stream chunks add up.
#ifndef KVCANARY_AUDITOR_TARGET_ANSWER_LOGPROBS_H_
#define KVCANARY_AUDITOR_TARGET_ANSWER_LOGPROBS_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// One position: the token's text, its log-probability (none where the
// server sent null: the first echoed prompt token of OpenAI and vLLM), and
// the alternatives as sent (their order is the server's; never assume the
// first is the token itself).
struct AnswerLogprob {
  std::string token;
  std::optional<double> logprob;
  std::vector<std::pair<std::string, double>> top;
  bool operator==(const AnswerLogprob& o) const {
    return token == o.token && logprob == o.logprob && top == o.top;
  }
};

struct AnswerLogprobs {
  // Some choice carried a logprobs object (not null): the target returns
  // them.
  bool present = false;
  std::vector<AnswerLogprob> positions;
  // Why a logprobs object could not be read (an unknown shape, a
  // non-number figure); "" when all could.
  std::string malformed;
};

// Adds choice["logprobs"] (null or absent: nothing) to *out.
void TakeChoiceLogprobs(const nlohmann::json& choice, AnswerLogprobs* out);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TARGET_ANSWER_LOGPROBS_H_
