// Llama-architecture model weights: loading llama2.c checkpoints, and the
// deterministic synthetic models the engine generates itself (the embedded
// default, and larger shapes for benchmarks).
//
// llama2.c checkpoint format (legacy, version 0): a header of 7 little-endian
// int32 — dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len —
// where a negative vocab_size means the classifier is stored separately
// (positive: shared with the token embedding). Then f32 weights in this order:
//   token_embedding (vocab, dim), rms_att (layers, dim),
//   wq (layers, dim, dim), wk (layers, kv_dim, dim), wv (layers, kv_dim, dim),
//   wo (layers, dim, dim), rms_ffn (layers, dim),
//   w1 (layers, hidden, dim), w2 (layers, dim, hidden), w3 (layers, hidden,
//   dim), rms_final (dim), freq_cis_real (seq_len, head_dim/2), freq_cis_imag
//   (seq_len, head_dim/2), [wcls (vocab, dim) if not shared].
// Matrices are row-major (out_features, in_features): y = W x.
#ifndef KVCANARY_ENGINE_MODEL_MODEL_H_
#define KVCANARY_ENGINE_MODEL_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvcanary::engine {

struct ModelConfig {
  int dim = 0;
  int hidden_dim = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int vocab_size = 0;
  int seq_len = 0;
  bool shared_classifier = true;

  int head_dim() const { return dim / n_heads; }
  int kv_dim() const { return head_dim() * n_kv_heads; }
  // kInvalidArgument naming the first field that is out of range or
  // inconsistent (dim % n_heads, n_heads % n_kv_heads, odd head_dim, ...).
  absl::Status Validate() const;
  std::string DebugString() const;
};

// The stories260K shape (and the shape of the embedded default model).
ModelConfig Stories260KConfig();
// The llama2.c "15M" shape used for performance work.
ModelConfig Stories15MShapeConfig();

struct ModelWeights {
  // All f32, row-major (out_features, in_features).
  std::vector<float> token_embedding;  // (vocab, dim)
  std::vector<float> rms_att;          // (layers, dim)
  std::vector<float> wq;               // (layers, dim, dim)
  std::vector<float> wk;               // (layers, kv_dim, dim)
  std::vector<float> wv;               // (layers, kv_dim, dim)
  std::vector<float> wo;               // (layers, dim, dim)
  std::vector<float> rms_ffn;          // (layers, dim)
  std::vector<float> w1;               // (layers, hidden, dim)
  std::vector<float> w2;               // (layers, dim, hidden)
  std::vector<float> w3;               // (layers, hidden, dim)
  std::vector<float> rms_final;        // (dim)
  std::vector<float> wcls;             // (vocab, dim); empty when shared

  // The classifier matrix, whether shared or not: (vocab, dim).
  const float* classifier() const {
    return wcls.empty() ? token_embedding.data() : wcls.data();
  }
};

struct Model {
  ModelConfig config;
  ModelWeights weights;
  std::string source;  // file path, or "synthetic:<seed>" for generated ones
};

// Resizes every tensor of `weights` to the size `config` gives it (wcls
// empty when the classifier is shared). REQUIRES: config is valid.
void SizeWeights(const ModelConfig& config, ModelWeights* weights);
// kInvalidArgument unless model.config is valid and every tensor has the
// size it gives (wcls empty when shared): what a writer can store.
absl::Status CheckWeightSizes(const Model& model);

// The status of a failed file operation from its errno: kNotFound,
// kPermissionDenied, kResourceExhausted (no space) or kInternal, with
// "<message>: <strerror>".
absl::Status FileErrorStatus(int err, const std::string& message);

// Loads a llama2.c checkpoint. Errors name the file and what is wrong:
// kNotFound (cannot open), kDataLoss (truncated: "expected N bytes, file has
// M"; trailing garbage; non-finite weights), kInvalidArgument (header out of
// range or inconsistent). Never crashes on any input.
absl::StatusOr<Model> LoadLlama2cModel(const std::string& path);

// Writes `model` as a llama2.c checkpoint (the format above; the RoPE
// frequency arrays are written as llama2.c's export does).
absl::Status WriteLlama2cModel(const Model& model, const std::string& path);

// A deterministic synthetic model of the given shape, generated from `seed`
// with SplitMix64 (docs/model.md): embedding and matrices uniform in
// [-a, a] with a = 1/sqrt(in_features) (embedding: a = 1), rmsnorm weights
// 1 + uniform(-0.1, 0.1). The same seed gives the same bytes on every machine.
Model SyntheticModel(const ModelConfig& config, uint64_t seed);

// The engine's embedded default: SyntheticModel(DefaultModelConfig(),
// kDefaultModelSeed). DefaultModelConfig() is the stories260K shape with an
// untied classifier (a random model with a tied one just repeats its input).
ModelConfig DefaultModelConfig();
inline constexpr uint64_t kDefaultModelSeed =
    0x6b7663616e617279ull;  // "kvcanary"
Model DefaultModel();

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_MODEL_MODEL_H_
