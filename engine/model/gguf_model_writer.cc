// Writing llama models as GGUF files (`kvcanary-engine write-model --format
// gguf`): the header as llama.cpp's converters write it, each tensor in
// F32, F16 or Q8_0 as asked, streamed to a sink or into a file renamed
// into place.
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_model.h"
#include "engine/model/gguf_model_internal.h"
#include "engine/model/gguf_tokenizer.h"
#include "engine/model/quantization.h"

namespace kvcanary::engine {
namespace {

using gguf::TensorType;
using gguf_model_internal::kRmsEpsilon;
using gguf_model_internal::kRopeBase;
using gguf_model_internal::LlamaTensorSlots;
using gguf_model_internal::Prefixed;
using gguf_model_internal::TensorSlot;

// The type a tensor is stored in: norms (1-D) stay F32; F16 and Q8_0
// matrices as asked, except that Q8_0 needs rows of whole 32-value blocks
// and falls back to F16, as llama.cpp's quantizer does.
TensorType StoredType(const TensorSlot& slot, GgufWeightType type) {
  if (slot.dims.size() == 1 || type == GgufWeightType::kF32) {
    return TensorType::kF32;
  }
  if (type == GgufWeightType::kQ8_0 && slot.dims[0] % kQ8_0BlockValues == 0) {
    return TensorType::kQ8_0;
  }
  return TensorType::kF16;
}

// general.file_type (llama_ftype): ALL_F32, MOSTLY_F16, MOSTLY_Q8_0.
uint32_t FileType(GgufWeightType type) {
  switch (type) {
    case GgufWeightType::kF32:
      return 0;
    case GgufWeightType::kF16:
      return 1;
    case GgufWeightType::kQ8_0:
      return 7;
  }
  return 0;
}

// general.name: the source file's name without folders and extension.
std::string ModelName(const Model& model) {
  const std::string& source = model.source;
  if (source.empty() || source.rfind("synthetic:", 0) == 0) {
    return "kvcanary-synthetic";
  }
  std::string base = source.substr(source.find_last_of('/') + 1);
  return base.substr(0, base.rfind('.'));
}

// The header of `model`'s file: metadata as llama.cpp's converters write
// it, and the tensor infos laid out in order.
gguf::File HeaderFor(const Model& model, const Tokenizer* tokenizer,
                     GgufWeightType type,
                     const std::vector<TensorSlot>& slots) {
  using gguf::Value;
  const ModelConfig& c = model.config;
  gguf::File f;
  f.metadata = {
      {"general.architecture", Value::String("llama")},
      {"general.name", Value::String(ModelName(model))},
      {"general.file_type", Value::Uint32(FileType(type))},
      {"llama.context_length", Value::Uint32(c.seq_len)},
      {"llama.embedding_length", Value::Uint32(c.dim)},
      {"llama.feed_forward_length", Value::Uint32(c.hidden_dim)},
      {"llama.block_count", Value::Uint32(c.n_layers)},
      {"llama.attention.head_count", Value::Uint32(c.n_heads)},
      {"llama.attention.head_count_kv", Value::Uint32(c.n_kv_heads)},
      {"llama.rope.dimension_count", Value::Uint32(c.head_dim())},
      {"llama.rope.freq_base", Value::Float32(kRopeBase)},
      {"llama.attention.layer_norm_rms_epsilon", Value::Float32(kRmsEpsilon)},
  };
  if (type == GgufWeightType::kQ8_0) {
    f.metadata.push_back({"general.quantization_version", Value::Uint32(2)});
  }
  if (tokenizer != nullptr) gguf::AddTokenizer(*tokenizer, &f);
  for (const TensorSlot& slot : slots) {
    f.tensors.push_back({slot.name, slot.dims, StoredType(slot, type), 0});
  }
  f.LayOutTensors();
  return f;
}

absl::Status OutOfF16Range(const gguf::TensorInfo& t, int64_t index) {
  return absl::InvalidArgumentError(
      absl::StrCat("cannot write model: tensor '", t.name, "' at index ", index,
                   " is beyond the F16 range (|w| <= 65504)"));
}

bool IsInfOrNan(uint16_t half) { return (half & 0x7c00) == 0x7c00; }

// Appends the n values at x as tensor `t` stores them, then zero padding to
// `alignment`.
absl::Status EncodeTensorData(const float* x, int64_t n,
                              const gguf::TensorInfo& t, uint32_t alignment,
                              std::string* out) {
  const size_t start = out->size();
  if (t.type == TensorType::kF32) {
    out->append(reinterpret_cast<const char*>(x), static_cast<size_t>(n) * 4);
  } else if (t.type == TensorType::kF16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t half = F32ToF16(x[i]);
      if (IsInfOrNan(half)) return OutOfF16Range(t, i);
      out->push_back(static_cast<char>(half & 0xff));
      out->push_back(static_cast<char>(half >> 8));
    }
  } else {
    QuantizeQ8_0(x, n, out);
    for (int64_t b = 0; b < n / kQ8_0BlockValues; ++b) {
      const char* block = out->data() + start + b * kQ8_0BlockBytes;
      const uint16_t scale = static_cast<uint16_t>(
          static_cast<uint8_t>(block[0]) | static_cast<uint8_t>(block[1]) << 8);
      if (IsInfOrNan(scale)) return OutOfF16Range(t, b * kQ8_0BlockValues);
    }
  }
  const size_t size = out->size() - start;
  out->resize(start + (size + alignment - 1) / alignment * alignment, '\0');
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GgufWeightType> ParseGgufWeightType(absl::string_view name) {
  if (name == "f32") return GgufWeightType::kF32;
  if (name == "f16") return GgufWeightType::kF16;
  if (name == "q8_0") return GgufWeightType::kQ8_0;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown weight type '", name, "' (want f32, f16 or q8_0)"));
}

absl::Status EncodeGgufModel(
    const Model& model, const Tokenizer* tokenizer, GgufWeightType type,
    const std::function<absl::Status(absl::string_view)>& sink) {
  if (absl::Status s = CheckWeightSizes(model); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write model: ", s.message()));
  }
  if (tokenizer != nullptr &&
      tokenizer->vocab_size() != model.config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot write model: the tokenizer has ", tokenizer->vocab_size(),
        " tokens, the model's vocabulary is ", model.config.vocab_size));
  }
  const std::vector<TensorSlot> slots = LlamaTensorSlots(model.config);
  gguf::File header = HeaderFor(model, tokenizer, type, slots);
  std::string chunk;
  header.EncodeTo(&chunk);
  RETURN_IF_ERROR(sink(chunk));
  for (size_t i = 0; i < slots.size(); ++i) {
    chunk.clear();
    const TensorSlot& slot = slots[i];
    RETURN_IF_ERROR(EncodeTensorData(
        (model.weights.*slot.member).data() + slot.first, slot.count(),
        header.tensors[i], header.alignment(), &chunk));
    RETURN_IF_ERROR(sink(chunk));
  }
  return absl::OkStatus();
}

absl::Status WriteGgufModel(const Model& model, const Tokenizer* tokenizer,
                            GgufWeightType type, const std::string& path) {
  // A temporary next to `path`, renamed into place: a reader never sees a
  // half-written file.
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  if (file == nullptr) return FileErrorStatus(errno, tmp + ": cannot create");
  absl::Status status =
      EncodeGgufModel(model, tokenizer, type, [&](absl::string_view bytes) {
        if (std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size()) {
          return absl::OkStatus();
        }
        return FileErrorStatus(errno != 0 ? errno : EIO,
                               path + ": cannot write");
      });
  if (std::fclose(file) != 0 && status.ok()) {
    status = FileErrorStatus(errno != 0 ? errno : EIO, path + ": cannot write");
  }
  if (status.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    status = FileErrorStatus(errno, path + ": cannot rename the temporary");
  }
  if (!status.ok()) {
    std::remove(tmp.c_str());
    return absl::IsInvalidArgument(status) ? Prefixed(path, status) : status;
  }
  return absl::OkStatus();
}

}  // namespace kvcanary::engine
