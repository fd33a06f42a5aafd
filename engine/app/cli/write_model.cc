// kvcanary-engine write-model: a deterministic synthetic model, or a model
// file converted, written as a llama2.c checkpoint or a GGUF file
// (docs/model.md, docs/gguf.md).
#include <cstdio>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/app/cli/commands.h"
#include "engine/app/cli/shared_flags.h"
#include "engine/model/gguf_model.h"
#include "engine/model/model.h"
#include "engine/model/model_loader.h"
#include "engine/model/tokenizer.h"

ABSL_FLAG(std::string, shape, "260k",
          "Shape of the model to write: 260k (stories260K) or 15m (the "
          "stories15M shape).");
ABSL_FLAG(std::string, from, "",
          "write-model: convert this model file (llama2.c or GGUF) instead "
          "of generating one (--shape and --seed are then unused).");
ABSL_FLAG(std::string, format, "llama2c",
          "write-model: the file format, llama2c or gguf.");
ABSL_FLAG(std::string, type, "f32",
          "write-model --format gguf: the weights' type, f32, f16 or q8_0 "
          "(norms stay f32; q8_0 matrices whose rows are not whole blocks of "
          "32 are stored f16).");
ABSL_FLAG(std::string, out, "", "File to write the checkpoint to.");

namespace kvcanary::engine::cli {
namespace {

// The model write-model writes: --from a file, else the synthetic --shape
// and --seed (with the default tokenizer, which a GGUF file carries).
absl::StatusOr<ModelFile> WriteModelSource() {
  const std::string from = absl::GetFlag(FLAGS_from);
  if (!from.empty()) return LoadModelFile(from, 0);
  const std::string shape = absl::GetFlag(FLAGS_shape);
  ModelConfig config;
  if (shape == "260k") {
    config = Stories260KConfig();
  } else if (shape == "15m") {
    config = Stories15MShapeConfig();
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown --shape '", shape, "' (want 260k or 15m)"));
  }
  const uint64_t seed = absl::GetFlag(FLAGS_seed) != 0
                            ? absl::GetFlag(FLAGS_seed)
                            : kDefaultModelSeed;
  Model model = SyntheticModel(config, seed);
  Tokenizer tokenizer = Tokenizer::Default(config.vocab_size);
  return ModelFile{std::move(model), std::move(tokenizer), ""};
}

absl::Status WriteModel() {
  const std::string out = absl::GetFlag(FLAGS_out);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (out.empty()) return absl::InvalidArgumentError("write-model needs --out");
  if (format != "llama2c" && format != "gguf") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown --format '", format, "' (want llama2c or gguf)"));
  }
  ASSIGN_OR_RETURN(const GgufWeightType type,
                   ParseGgufWeightType(absl::GetFlag(FLAGS_type)));
  ASSIGN_OR_RETURN(ModelFile source, WriteModelSource());
  if (format == "llama2c") {
    if (type != GgufWeightType::kF32 || !absl::GetFlag(FLAGS_tokenizer).empty())
      return absl::InvalidArgumentError(
          "--type and --tokenizer are for --format gguf (a llama2.c "
          "checkpoint is f32 and has no tokenizer)");
    return WriteLlama2cModel(source.model, out);
  }
  if (!absl::GetFlag(FLAGS_tokenizer).empty()) {
    ASSIGN_OR_RETURN(source.tokenizer,
                     Tokenizer::Load(absl::GetFlag(FLAGS_tokenizer),
                                     source.model.config.vocab_size));
  }
  if (!source.tokenizer.has_value()) {
    std::fprintf(stderr,
                 "note: %s has no tokenizer (pass --tokenizer to embed one); "
                 "loading it needs --tokenizer\n",
                 out.c_str());
  }
  return WriteGgufModel(
      source.model, source.tokenizer ? &*source.tokenizer : nullptr, type, out);
}

const CommandRegistration kWriteModel(
    EngineCommands(),
    {60,
     {"write-model",
      "Writes a deterministic synthetic model, or converts --from a model "
      "file, as a llama2.c checkpoint or a GGUF file (F32, F16 or Q8_0).",
      {"shape", "seed", "from", "format", "type", "tokenizer", "out"},
      {}},
     [](const CliParse&) { return ExitCode("write-model", WriteModel()); }});

}  // namespace
}  // namespace kvcanary::engine::cli
