#include "engine/model/logprobs.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace kvcanary::engine {

TokenLogprobs ComputeLogprobs(const float* logits, int vocab_size, int token,
                              int top) {
  CHECK(token >= 0 && token < vocab_size)
      << "token " << token << " outside a vocabulary of " << vocab_size;
  CHECK(top >= 0 && top <= kMaxTopLogprobs) << "top " << top;
  // log p_i = x_i - (max + log sum_j exp(x_j - max)), the sum in double and
  // in index order: one sequence of operations whatever the batch.
  float max = logits[0];
  for (int i = 1; i < vocab_size; ++i) max = std::max(max, logits[i]);
  double sum = 0.0;
  for (int i = 0; i < vocab_size; ++i) {
    sum += std::exp(static_cast<double>(logits[i]) - max);
  }
  const double norm = static_cast<double>(max) + std::log(sum);
  auto logprob = [&](int i) {
    return static_cast<float>(static_cast<double>(logits[i]) - norm);
  };
  TokenLogprobs out;
  out.token = token;
  out.logprob = logprob(token);
  if (top == 0) return out;
  std::vector<int> ids(vocab_size);
  for (int i = 0; i < vocab_size; ++i) ids[i] = i;
  const int k = std::min(top, vocab_size);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  out.top.reserve(k);
  for (int i = 0; i < k; ++i) out.top.emplace_back(ids[i], logprob(ids[i]));
  return out;
}

}  // namespace kvcanary::engine
