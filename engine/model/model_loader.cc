#include "engine/model/model_loader.h"

#include <fstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/model/gguf_model.h"

namespace kvcanary::engine {
namespace {

// The model at `context` positions, which may not exceed what it was
// trained with (`what` names the model in the error).
absl::Status SetContextWithin(int context, const std::string& what,
                              Model* model) {
  if (context == 0) return absl::OkStatus();
  if (context < 1 || context > model->config.seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": context ", context, " is outside [1, ", model->config.seq_len,
        "], the context the model was trained with"));
  }
  model->config.seq_len = context;
  return absl::OkStatus();
}

absl::StatusOr<ModelFile> LoadGgufFile(const std::string& path, int context) {
  GgufModelOptions options;
  options.context = context;
  ASSIGN_OR_RETURN(GgufModel gguf, LoadGgufModel(path, options));
  ModelFile file{std::move(gguf.model), std::move(gguf.tokenizer), ""};
  if (file.model.config.seq_len > gguf.recorded_context) {
    file.note = absl::StrCat(
        path, ": running at context ", file.model.config.seq_len,
        ", above the ", gguf.recorded_context,
        " it records (llama.context_length); only right if the model was "
        "trained with at least that");
  }
  return file;
}

}  // namespace

bool IsGgufPath(const std::string& path) {
  if (absl::EndsWithIgnoreCase(path, ".gguf")) return true;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string(magic, 4) == "GGUF";
}

absl::StatusOr<ModelFile> LoadModelFile(const std::string& path, int context) {
  if (IsGgufPath(path)) return LoadGgufFile(path, context);
  ASSIGN_OR_RETURN(Model model, LoadLlama2cModel(path));
  RETURN_IF_ERROR(SetContextWithin(context, path, &model));
  return ModelFile{std::move(model), std::nullopt, ""};
}

absl::StatusOr<LoadedModel> LoadModelAndTokenizer(
    const ModelLoadOptions& options) {
  if (options.model_path.empty()) {
    if (!options.tokenizer_path.empty()) {
      return absl::InvalidArgumentError("a tokenizer given without a model");
    }
    Model model = DefaultModel();
    RETURN_IF_ERROR(
        SetContextWithin(options.context, "the embedded model", &model));
    Tokenizer tokenizer = Tokenizer::Default(model.config.vocab_size);
    return LoadedModel{std::move(model), std::move(tokenizer), ""};
  }
  ASSIGN_OR_RETURN(ModelFile file,
                   LoadModelFile(options.model_path, options.context));
  if (!options.tokenizer_path.empty()) {
    ASSIGN_OR_RETURN(
        Tokenizer tokenizer,
        Tokenizer::Load(options.tokenizer_path, file.model.config.vocab_size));
    return LoadedModel{std::move(file.model), std::move(tokenizer),
                       std::move(file.note)};
  }
  if (!file.tokenizer.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.model_path, ": needs a tokenizer file",
                     IsGgufPath(options.model_path)
                         ? " (it has no tokenizer.ggml.tokens of its own)"
                         : " (a llama2.c checkpoint has none of its own)"));
  }
  return LoadedModel{std::move(file.model), *std::move(file.tokenizer),
                     std::move(file.note)};
}

}  // namespace kvcanary::engine
