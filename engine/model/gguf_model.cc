// Reading llama models from GGUF files: the llama.* metadata onto a
// ModelConfig (refusing what the kernels do not run), the tensors onto
// ModelWeights (F16 and Q8_0 dequantized to f32), the tokenizer
// (gguf_tokenizer.h), and the file mapped from its path.
#include "engine/model/gguf_model.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_model_internal.h"
#include "engine/model/gguf_tokenizer.h"
#include "engine/model/quantization.h"

namespace kvcanary::engine {
namespace gguf_model_internal {

std::vector<TensorSlot> LlamaTensorSlots(const ModelConfig& c) {
  const uint64_t dim = c.dim, hidden = c.hidden_dim, kv_dim = c.kv_dim();
  const uint64_t vocab = c.vocab_size;
  std::vector<TensorSlot> slots = {
      {"token_embd.weight", {dim, vocab}, &ModelWeights::token_embedding},
      {"output_norm.weight", {dim}, &ModelWeights::rms_final}};
  if (!c.shared_classifier) {
    slots.push_back({"output.weight", {dim, vocab}, &ModelWeights::wcls});
  }
  for (int l = 0; l < c.n_layers; ++l) {
    auto add = [&](const char* part, std::vector<uint64_t> dims,
                   std::vector<float> ModelWeights::*member) {
      TensorSlot slot{absl::StrCat("blk.", l, ".", part, ".weight"),
                      std::move(dims), member};
      slot.first = l * slot.count();
      slots.push_back(std::move(slot));
    };
    add("attn_q", {dim, dim}, &ModelWeights::wq);
    add("attn_k", {dim, kv_dim}, &ModelWeights::wk);
    add("attn_v", {dim, kv_dim}, &ModelWeights::wv);
    add("attn_output", {dim, dim}, &ModelWeights::wo);
    add("attn_norm", {dim}, &ModelWeights::rms_att);
    add("ffn_gate", {dim, hidden}, &ModelWeights::w1);
    add("ffn_down", {hidden, dim}, &ModelWeights::w2);
    add("ffn_up", {dim, hidden}, &ModelWeights::w3);
    add("ffn_norm", {dim}, &ModelWeights::rms_ffn);
  }
  return slots;
}

absl::Status Prefixed(const std::string& name, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(name, ": ", s.message()));
}

}  // namespace gguf_model_internal

namespace {

using gguf::TensorType;
using gguf_model_internal::kRmsEpsilon;
using gguf_model_internal::kRopeBase;
using gguf_model_internal::LlamaTensorSlots;
using gguf_model_internal::Prefixed;
using gguf_model_internal::TensorSlot;

std::string Shape(const std::vector<uint64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

// A metadata integer that fits an int, or `fallback` when absent and
// fallback >= 0.
absl::StatusOr<int> GetInt(const gguf::File& f, absl::string_view key,
                           int fallback = -1) {
  if (fallback >= 0 && f.Find(key) == nullptr) return fallback;
  ASSIGN_OR_RETURN(const uint64_t v, f.GetUint(key));
  if (v > (uint64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata key '", key, "' is ", v, ", too large"));
  }
  return static_cast<int>(v);
}

// Whether output.weight is token_embd.weight again, byte for byte: the
// classifier is then shared, as in a llama2.c checkpoint of the same model.
bool OutputTiedToEmbedding(const gguf::File& f, absl::string_view bytes) {
  const gguf::TensorInfo* out = f.FindTensor("output.weight");
  const gguf::TensorInfo* embd = f.FindTensor("token_embd.weight");
  if (out == nullptr) return true;  // llama.cpp's tied classifier
  if (embd == nullptr || out->type != embd->type || out->dims != embd->dims) {
    return false;
  }
  const uint64_t size = out->size_bytes();
  return bytes.substr(f.data_offset + out->offset, size) ==
         bytes.substr(f.data_offset + embd->offset, size);
}

// The vocabulary: token_embd.weight's row count.
absl::StatusOr<int> VocabSize(const gguf::File& f) {
  const gguf::TensorInfo* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr) {
    return absl::InvalidArgumentError("missing tensor 'token_embd.weight'");
  }
  if (embd->dims.size() != 2 || embd->dims[1] > (uint64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor 'token_embd.weight' has shape ", Shape(embd->dims),
                     ", expected [embedding, vocab]"));
  }
  const int vocab = static_cast<int>(embd->dims[1]);
  ASSIGN_OR_RETURN(const int stated, GetInt(f, "llama.vocab_size", vocab));
  if (stated != vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("llama.vocab_size is ", stated,
                     " but token_embd.weight has ", vocab, " rows"));
  }
  return vocab;
}

absl::StatusOr<ModelConfig> ConfigFromMetadata(const gguf::File& f,
                                               absl::string_view bytes) {
  ASSIGN_OR_RETURN(const std::string arch, f.GetString("general.architecture"));
  if (arch != "llama") {
    return absl::UnimplementedError(absl::StrCat(
        "architecture '", arch, "' is not supported (only llama)"));
  }
  ModelConfig c;
  ASSIGN_OR_RETURN(c.dim, GetInt(f, "llama.embedding_length"));
  ASSIGN_OR_RETURN(c.hidden_dim, GetInt(f, "llama.feed_forward_length"));
  ASSIGN_OR_RETURN(c.n_layers, GetInt(f, "llama.block_count"));
  ASSIGN_OR_RETURN(c.n_heads, GetInt(f, "llama.attention.head_count"));
  ASSIGN_OR_RETURN(c.n_kv_heads,
                   GetInt(f, "llama.attention.head_count_kv", c.n_heads));
  ASSIGN_OR_RETURN(c.seq_len, GetInt(f, "llama.context_length"));
  ASSIGN_OR_RETURN(c.vocab_size, VocabSize(f));
  c.shared_classifier = OutputTiedToEmbedding(f, bytes);
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("llama.* metadata: ", s.message()));
  }
  return c;
}

// A key that must equal `want` where present (absent: the default is it).
absl::Status CheckOptionalInt(const gguf::File& f, absl::string_view key,
                              int want, absl::string_view what) {
  if (f.Find(key) == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(const int v, GetInt(f, key));
  if (v == want) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(key, " is ", v, ", not ", want,
                                               ": ", what, " not supported"));
}

// The parts of the llama architecture the engine's kernels do not run.
absl::Status CheckSupportedFeatures(const gguf::File& f, const ModelConfig& c) {
  ASSIGN_OR_RETURN(const double eps,
                   f.GetFloat("llama.attention.layer_norm_rms_epsilon"));
  if (static_cast<float>(eps) != kRmsEpsilon) {
    return absl::UnimplementedError(
        absl::StrCat("llama.attention.layer_norm_rms_epsilon is ", eps,
                     ": the kernels' RMS norm uses 1e-5"));
  }
  if (f.Find("llama.rope.freq_base") != nullptr) {
    ASSIGN_OR_RETURN(const double base, f.GetFloat("llama.rope.freq_base"));
    if (base != kRopeBase) {
      return absl::UnimplementedError(absl::StrCat(
          "llama.rope.freq_base is ", base, ": the kernels' RoPE uses 10000"));
    }
  }
  if (f.Find("llama.rope.scaling.type") != nullptr) {
    ASSIGN_OR_RETURN(const std::string type,
                     f.GetString("llama.rope.scaling.type"));
    if (type != "none") {
      return absl::UnimplementedError(absl::StrCat(
          "llama.rope.scaling.type is '", type, "': not supported"));
    }
  }
  for (const char* key :
       {"llama.rope.scale_linear", "llama.rope.scaling.factor"}) {
    if (f.Find(key) == nullptr) continue;
    ASSIGN_OR_RETURN(const double scale, f.GetFloat(key));
    if (scale != 1.0) {
      return absl::UnimplementedError(
          absl::StrCat(key, " is ", scale, ": RoPE scaling is not supported"));
    }
  }
  RETURN_IF_ERROR(
      CheckOptionalInt(f, "llama.expert_count", 0, "a mixture of experts is"));
  RETURN_IF_ERROR(CheckOptionalInt(f, "llama.rope.dimension_count",
                                   c.head_dim(), "partial RoPE is"));
  RETURN_IF_ERROR(CheckOptionalInt(f, "llama.attention.key_length",
                                   c.head_dim(),
                                   "a key head size other "
                                   "than embedding / heads is"));
  return CheckOptionalInt(f, "llama.attention.value_length", c.head_dim(),
                          "a value head size other than embedding / heads is");
}

// Index of the first NaN or infinity in v[0, n), or -1 (a bit test).
int64_t FirstNonFinite(const float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    if ((bits & 0x7f800000u) == 0x7f800000u) return i;
  }
  return -1;
}

// The values of `t` (n of them) from its bytes at `data`, as f32.
void DecodeTensor(const gguf::TensorInfo& t, const char* data, int64_t n,
                  float* out) {
  switch (t.type) {
    case TensorType::kF32:
      std::memcpy(out, data, static_cast<size_t>(n) * 4);
      return;
    case TensorType::kF16:
      return DequantizeF16(data, n, out);
    case TensorType::kQ8_0:
      return DequantizeQ8_0(data, n, out);
  }
}

// Every tensor of the file is one of `slots` (output.weight also when it
// is tied to the embedding and dropped).
absl::Status CheckNoExtraTensors(const gguf::File& f,
                                 const std::vector<TensorSlot>& slots) {
  absl::flat_hash_set<std::string> names = {"output.weight"};
  for (const TensorSlot& slot : slots) names.insert(slot.name);
  for (const gguf::TensorInfo& t : f.tensors) {
    if (!names.contains(t.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' is not part of a llama model"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadTensors(const gguf::File& f, absl::string_view bytes,
                         const ModelConfig& config, ModelWeights* weights) {
  const std::vector<TensorSlot> slots = LlamaTensorSlots(config);
  RETURN_IF_ERROR(CheckNoExtraTensors(f, slots));
  SizeWeights(config, weights);
  for (const TensorSlot& slot : slots) {
    const gguf::TensorInfo* t = f.FindTensor(slot.name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing tensor '", slot.name, "'"));
    }
    if (t->dims != slot.dims) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", slot.name, "' has shape ", Shape(t->dims),
                       ", expected ", Shape(slot.dims)));
    }
    float* out = (weights->*slot.member).data() + slot.first;
    DecodeTensor(*t, bytes.data() + f.data_offset + t->offset, slot.count(),
                 out);
    if (const int64_t i = FirstNonFinite(out, slot.count()); i >= 0) {
      return absl::DataLossError(absl::StrCat("non-finite weight in ",
                                              slot.name, " at index ", i, " (",
                                              out[i], ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<GgufModel> DecodeUnprefixed(absl::string_view bytes,
                                           const std::string& name,
                                           const GgufModelOptions& options) {
  ASSIGN_OR_RETURN(const gguf::File f, gguf::File::Decode(bytes));
  GgufModel out;
  out.model.source = name;
  ASSIGN_OR_RETURN(out.model.config, ConfigFromMetadata(f, bytes));
  RETURN_IF_ERROR(CheckSupportedFeatures(f, out.model.config));
  out.recorded_context = out.model.config.seq_len;
  if (options.context != 0) {
    out.model.config.seq_len = options.context;
    if (absl::Status s = out.model.config.Validate(); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("context ", options.context, ": ", s.message()));
    }
  }
  RETURN_IF_ERROR(ReadTensors(f, bytes, out.model.config, &out.model.weights));
  ASSIGN_OR_RETURN(out.tokenizer,
                   gguf::TokenizerFromMetadata(f, out.model.config.vocab_size));
  return out;
}

// A file mapped read-only for as long as this lives.
class MappedFile {
 public:
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(
      const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return FileErrorStatus(errno, path + ": cannot open");
    auto file = std::unique_ptr<MappedFile>(new MappedFile());
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      close(fd);
      return absl::InvalidArgumentError(path + ": not a regular file");
    }
    file->size_ = static_cast<size_t>(st.st_size);
    if (file->size_ > 0) {
      void* data = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (data == MAP_FAILED) {
        const int err = errno;
        close(fd);
        return FileErrorStatus(err, path + ": cannot map");
      }
      file->data_ = data;
    }
    close(fd);
    return file;
  }
  ~MappedFile() {
    if (data_ != nullptr) munmap(data_, size_);
  }
  absl::string_view bytes() const {
    return absl::string_view(static_cast<const char*>(data_), size_);
  }

 private:
  MappedFile() = default;
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

absl::StatusOr<GgufModel> DecodeGgufModel(absl::string_view bytes,
                                          const std::string& name,
                                          const GgufModelOptions& options) {
  absl::StatusOr<GgufModel> model = DecodeUnprefixed(bytes, name, options);
  if (!model.ok()) return Prefixed(name, model.status());
  return model;
}

absl::StatusOr<GgufModel> LoadGgufModel(const std::string& path,
                                        const GgufModelOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  return DecodeGgufModel(file->bytes(), path, options);
}

}  // namespace kvcanary::engine
