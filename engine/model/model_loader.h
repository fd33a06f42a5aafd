// The one way the engine's commands take a model: a llama2.c checkpoint, a
// GGUF file (engine/model/gguf_model.h) or, with no path, the embedded
// default; the tokenizer from a file, from the GGUF itself, or the default's;
// and the context to run at.
#ifndef KVCANARY_ENGINE_MODEL_MODEL_LOADER_H_
#define KVCANARY_ENGINE_MODEL_MODEL_LOADER_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/model/model.h"
#include "engine/model/tokenizer.h"

namespace kvcanary::engine {

// Whether `path` is taken as a GGUF file: it starts with "GGUF", or its
// name ends in .gguf (so that a damaged one is reported as a GGUF file).
bool IsGgufPath(const std::string& path);

// A model file's weights, and its tokenizer if it carries one (GGUF).
struct ModelFile {
  Model model;
  std::optional<Tokenizer> tokenizer;
  // For the operator, empty if nothing to say: a context above the one the
  // file records.
  std::string note;
};

// Loads `path` (GGUF by IsGgufPath, else a llama2.c checkpoint) at
// `context` positions (0: the file's). A llama2.c checkpoint's seq_len is
// the context it was trained with: kInvalidArgument above it. A GGUF file
// takes any context in [1, 2^20]; above llama.context_length it sets `note`.
absl::StatusOr<ModelFile> LoadModelFile(const std::string& path, int context);

struct ModelLoadOptions {
  std::string model_path;      // empty: the embedded default model
  std::string tokenizer_path;  // empty: the GGUF's own, or the default's
  int context = 0;             // 0: the model's
};

struct LoadedModel {
  Model model;
  Tokenizer tokenizer;
  std::string note;  // as ModelFile::note
};

// The model and its tokenizer. kInvalidArgument for a tokenizer without a
// model, a llama2.c checkpoint without a tokenizer, a GGUF file without
// tokenizer.ggml.tokens and without a tokenizer file, or a context the
// embedded default (512) cannot take; errors of the loaders otherwise.
absl::StatusOr<LoadedModel> LoadModelAndTokenizer(
    const ModelLoadOptions& options);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_MODEL_MODEL_LOADER_H_
