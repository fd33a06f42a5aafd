// Token sampling, as llama2.c's run.c: greedy (temperature 0: argmax, first
// index on ties), or temperature then nucleus (top-p) sampling with a
// per-request xorshift generator seeded from the request's seed, so a
// request's samples never depend on what else is in the batch.
#ifndef KVCANARY_ENGINE_MODEL_SAMPLER_H_
#define KVCANARY_ENGINE_MODEL_SAMPLER_H_

#include <cstdint>
#include <vector>

namespace kvcanary::engine {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;   // (0, 1): nucleus sampling; else the full distribution
  uint64_t seed = 0;    // 0 is mapped to a fixed non-zero seed
  int max_tokens = 16;  // generated tokens at most
  bool ignore_eos = false;  // keep going past end tokens (benchmarks)
  // Log-probabilities (engine/model/logprobs.h) of each generated token
  // with this many top alternatives (0..kMaxTopLogprobs); -1: none.
  int logprobs = -1;
  // Also of each prompt token after the first (`echo` with `logprobs`),
  // with `logprobs` alternatives: the whole prompt is computed (no prefix
  // cache hits), its logits at every position.
  bool prompt_logprobs = false;
};

// Not thread-safe; one per request.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // Picks the next token from `logits` (vocab_size), which it may modify.
  int Sample(float* logits, int vocab_size);

 private:
  float RandomF32();
  SamplingParams params_;
  uint64_t rng_state_;
  std::vector<std::pair<float, int>> candidates_;  // top-p scratch
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_MODEL_SAMPLER_H_
