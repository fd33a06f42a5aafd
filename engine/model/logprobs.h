// Log-probabilities of the model's next-token distribution, as the OpenAI
// API returns them (`logprobs`, `top_logprobs`, `echo`): the log-softmax of
// the raw logits, before temperature and top-p, so they describe the model
// and not the sampling. Computed in one fixed order per row, so a row's
// figures are bitwise the same whatever else is in the batch
// (docs/exactness.md).
#ifndef KVCANARY_ENGINE_MODEL_LOGPROBS_H_
#define KVCANARY_ENGINE_MODEL_LOGPROBS_H_

#include <utility>
#include <vector>

namespace kvcanary::engine {

// The most top alternatives a request may ask for (OpenAI's and vLLM's
// default bound).
inline constexpr int kMaxTopLogprobs = 20;

// One position: the token there, its log-probability, and the `top` most
// likely tokens with theirs (most likely first, lower id first on ties).
struct TokenLogprobs {
  int token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int, float>> top;
  bool operator==(const TokenLogprobs& o) const {
    return token == o.token && logprob == o.logprob && top == o.top;
  }
};

// The log-probabilities of `token` and the `top` (0..kMaxTopLogprobs) most
// likely tokens under `logits` (vocab_size values, not modified).
// REQUIRES: 0 <= token < vocab_size (CHECKed).
TokenLogprobs ComputeLogprobs(const float* logits, int vocab_size, int token,
                              int top);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_MODEL_LOGPROBS_H_
