#include "engine/model/sampler.h"

#include <algorithm>

#include "kernels/cpu_kernels.h"

namespace kvcanary::engine {

Sampler::Sampler(const SamplingParams& params)
    : params_(params),
      rng_state_(params.seed != 0 ? params.seed : 0x2545F4914F6CDD1Dull) {}

float Sampler::RandomF32() {
  rng_state_ ^= rng_state_ >> 12;
  rng_state_ ^= rng_state_ << 25;
  rng_state_ ^= rng_state_ >> 27;
  const uint32_t u =
      static_cast<uint32_t>((rng_state_ * 0x2545F4914F6CDD1Dull) >> 32);
  return (u >> 8) / 16777216.0f;
}

int Sampler::Sample(float* logits, int vocab_size) {
  if (params_.temperature == 0.0f) return kernels::Argmax(logits, vocab_size);
  for (int i = 0; i < vocab_size; ++i) logits[i] /= params_.temperature;
  kernels::Softmax(logits, vocab_size);
  const float coin = RandomF32();
  if (params_.top_p <= 0.0f || params_.top_p >= 1.0f) {
    float cdf = 0.0f;
    for (int i = 0; i < vocab_size; ++i) {
      cdf += logits[i];
      if (coin < cdf) return i;
    }
    return vocab_size - 1;  // rounding
  }
  // Nucleus: the smallest set of most likely tokens whose mass exceeds top_p.
  // Tokens below (1 - top_p) / (n - 1) cannot be in it and are dropped first.
  const float cutoff = (1.0f - params_.top_p) / (vocab_size - 1);
  candidates_.clear();
  for (int i = 0; i < vocab_size; ++i) {
    if (logits[i] >= cutoff) candidates_.emplace_back(logits[i], i);
  }
  std::sort(
      candidates_.begin(), candidates_.end(), [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
      });
  float mass = 0.0f;
  size_t last = candidates_.size() - 1;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    mass += candidates_[i].first;
    if (mass > params_.top_p) {
      last = i;
      break;
    }
  }
  const float r = coin * mass;
  float cdf = 0.0f;
  for (size_t i = 0; i <= last; ++i) {
    cdf += candidates_[i].first;
    if (r < cdf) return candidates_[i].second;
  }
  return candidates_[last].second;
}

}  // namespace kvcanary::engine
