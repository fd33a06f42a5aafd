// Llama models in GGUF files (docs/gguf.md): the `llama.*` metadata and the
// tensor names (token_embd.weight, blk.N.attn_q.weight, ..., output.weight)
// mapped onto ModelConfig and ModelWeights; F16 and Q8_0 tensors
// dequantized to f32 at load (the kernels are f32); the tokenizer from the
// `tokenizer.ggml.*` metadata (gguf_tokenizer.h); and the writer of such
// files (`kvcanary-engine write-model --format gguf`, gguf_model_writer.cc).
#ifndef KVCANARY_ENGINE_MODEL_GGUF_MODEL_H_
#define KVCANARY_ENGINE_MODEL_GGUF_MODEL_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/model.h"
#include "engine/model/tokenizer.h"

namespace kvcanary::engine {

// How write-model stores the weights. kF16 and kQ8_0 keep the norms (1-D)
// in F32; kQ8_0 stores a matrix whose rows are not whole blocks of 32 (e.g.
// stories260K's ffn_down, rows of 172) as F16, as llama.cpp's quantizer
// falls back to.
enum class GgufWeightType { kF32, kF16, kQ8_0 };
// "f32", "f16" or "q8_0"; kInvalidArgument otherwise.
absl::StatusOr<GgufWeightType> ParseGgufWeightType(absl::string_view name);

struct GgufModelOptions {
  // The context (seq_len) to run at; 0: the file's llama.context_length.
  // Any value in [1, 2^20] is taken: the file cannot say what the model was
  // trained with beyond its recorded context (docs/gguf.md).
  int context = 0;
};

struct GgufModel {
  Model model;
  // From tokenizer.ggml.*; nullopt when the file has no tokenizer.ggml.tokens.
  std::optional<Tokenizer> tokenizer;
  int recorded_context = 0;  // llama.context_length
};

// Decodes a whole GGUF file already in memory; `name` (a path) starts every
// error message. Never crashes on any input. Errors, besides those of
// gguf::File::Decode:
//   kUnimplemented: general.architecture not llama; a feature of the
//     architecture the engine does not run (experts, RoPE scaling, partial
//     RoPE, a RoPE base other than 10000, an RMS epsilon other than 1e-5);
//     a tokenizer other than llama's sentencepiece.
//   kInvalidArgument: a missing or mistyped key; a shape ModelConfig
//     refuses; a missing, extra or misshapen tensor ("has shape [64, 32],
//     expected [64, 64]"); a tokenizer that does not fit the engine's (size
//     not the vocabulary, BOS not 1, EOS not 2, byte tokens not <0x00>..
//     <0xFF> at ids 3..258).
//   kDataLoss: a NaN or infinite weight once decoded.
absl::StatusOr<GgufModel> DecodeGgufModel(absl::string_view bytes,
                                          const std::string& name,
                                          const GgufModelOptions& options);

// Maps the file `path` (read-only, private) and decodes it. kNotFound /
// kPermissionDenied when it cannot be opened; kInvalidArgument when it is
// not a regular file.
absl::StatusOr<GgufModel> LoadGgufModel(const std::string& path,
                                        const GgufModelOptions& options);

// Encodes `model` as a GGUF file in `type`, with `tokenizer`'s vocabulary as
// tokenizer.ggml.* when not null, handing the bytes to `sink` in order (the
// header, then each tensor padded to the alignment). kInvalidArgument if the
// model is not writable (as WriteLlama2cModel) or a weight does not fit F16
// (|w| > 65504, or a Q8_0 block scale beyond it); a failure of `sink` is
// returned as is.
absl::Status EncodeGgufModel(
    const Model& model, const Tokenizer* tokenizer, GgufWeightType type,
    const std::function<absl::Status(absl::string_view)>& sink);
// EncodeGgufModel into `path`, through a temporary renamed into place.
absl::Status WriteGgufModel(const Model& model, const Tokenizer* tokenizer,
                            GgufWeightType type, const std::string& path);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_MODEL_GGUF_MODEL_H_
