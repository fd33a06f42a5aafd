#include "engine/model/gguf_model.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "engine/model/gguf.h"
#include "engine/model/quantization.h"

namespace kvcanary::engine {
namespace {

using gguf::TensorType;

constexpr absl::string_view kSentencePieceSpace = "\xe2\x96\x81";  // U+2581
// The kernels' constants (kernels/cpu_kernels.h): a file asking for others
// is refused rather than run wrongly.
constexpr float kRmsEpsilon = 1e-5f;
constexpr double kRopeBase = 10000.0;
// ggml's token types (tokenizer.ggml.token_type).
enum GgufTokenType : int32_t {
  kNormalToken = 1,
  kUnknownToken = 2,
  kControlToken = 3,
  kByteToken = 6,
};
constexpr int kFirstByteToken = 3;  // <0x00>; <0xFF> is 258

// One tensor of a llama model and where its values go in ModelWeights.
struct TensorSlot {
  std::string name;
  std::vector<uint64_t> dims;  // GGUF order: the row length first
  std::vector<float> ModelWeights::*member;
  int64_t first = 0;  // offset in the member, in values (layer * size)

  int64_t count() const {
    int64_t n = 1;
    for (uint64_t d : dims) n *= static_cast<int64_t>(d);
    return n;
  }
};

// The tensors of a llama model of `c` (valid), in the order llama.cpp's
// converters write them.
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

std::string Shape(const std::vector<uint64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

absl::Status Prefixed(const std::string& name, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(name, ": ", s.message()));
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

// A special token id that must be where the engine has it, if stated.
absl::Status CheckSpecialToken(const gguf::File& f, absl::string_view key,
                               int want) {
  if (f.Find(key) == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(const uint64_t id, f.GetUint(key));
  if (id == static_cast<uint64_t>(want)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      key, " is ", id, "; the engine's tokenizer has it at ", want));
}

// The byte tokens <0x00>..<0xFF> must be at ids 3..258, where the engine's
// byte fallback looks for them (engine/model/tokenizer.h).
absl::Status CheckByteTokens(const std::vector<std::string>& tokens,
                             const std::vector<int64_t>& types) {
  for (int b = 0; b < 256; ++b) {
    const size_t id = kFirstByteToken + b;
    const std::string want = absl::StrFormat("<0x%02X>", b);
    if (id >= tokens.size() || tokens[id] != want ||
        (!types.empty() && types[id] != kByteToken)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer: token ", id, " is not the byte token ", want,
          " (the byte tokens must be <0x00>..<0xFF> at ids 3..258)"));
    }
  }
  return absl::OkStatus();
}

// A GGUF token as llama2.c's tokenizer export spells it (so tok512.bin is
// stories260K.gguf's tokenizer exactly): U+2581 as a space, and BOS and EOS
// as "\n<s>\n" and "\n</s>\n".
std::string PieceFromGguf(const std::string& token, int id) {
  if (id == kBosToken) return "\n<s>\n";
  if (id == kEosToken) return "\n</s>\n";
  return absl::StrReplaceAll(token, {{kSentencePieceSpace, " "}});
}

// The optional per-token arrays, each of `vocab` entries.
absl::Status ReadTokenArrays(const gguf::File& f, size_t vocab,
                             std::vector<float>* scores,
                             std::vector<int64_t>* types) {
  if (f.Find("tokenizer.ggml.scores") != nullptr) {
    ASSIGN_OR_RETURN(*scores, f.GetFloat32Array("tokenizer.ggml.scores"));
  } else {
    scores->assign(vocab, 0.0f);  // the spec: equal scores when absent
  }
  if (f.Find("tokenizer.ggml.token_type") != nullptr) {
    ASSIGN_OR_RETURN(*types, f.GetIntArray("tokenizer.ggml.token_type"));
  }
  if (scores->size() != vocab || (!types->empty() && types->size() != vocab)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: ", vocab, " tokens but ", scores->size(),
                     " scores and ", types->size(), " token types"));
  }
  return absl::OkStatus();
}

absl::Status CheckTokenizerKind(const gguf::File& f) {
  if (f.Find("tokenizer.ggml.model") != nullptr) {
    ASSIGN_OR_RETURN(const std::string kind,
                     f.GetString("tokenizer.ggml.model"));
    if (kind != "llama") {
      return absl::UnimplementedError(
          absl::StrCat("tokenizer.ggml.model '", kind,
                       "' is not supported (only llama's sentencepiece)"));
    }
  }
  if (f.Find("tokenizer.ggml.add_space_prefix") != nullptr) {
    ASSIGN_OR_RETURN(const bool prefix,
                     f.GetBool("tokenizer.ggml.add_space_prefix"));
    if (!prefix) {
      return absl::UnimplementedError(
          "tokenizer.ggml.add_space_prefix is false; the engine's encoder "
          "always adds the sentencepiece space prefix");
    }
  }
  RETURN_IF_ERROR(
      CheckSpecialToken(f, "tokenizer.ggml.bos_token_id", kBosToken));
  return CheckSpecialToken(f, "tokenizer.ggml.eos_token_id", kEosToken);
}

absl::StatusOr<std::optional<Tokenizer>> TokenizerFromMetadata(
    const gguf::File& f, int vocab_size) {
  if (f.Find("tokenizer.ggml.tokens") == nullptr) return std::nullopt;
  RETURN_IF_ERROR(CheckTokenizerKind(f));
  ASSIGN_OR_RETURN(std::vector<std::string> tokens,
                   f.GetStringArray("tokenizer.ggml.tokens"));
  if (tokens.size() != static_cast<size_t>(vocab_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: ", tokens.size(),
                     " tokens, but the model's vocabulary is ", vocab_size));
  }
  std::vector<float> scores;
  std::vector<int64_t> types;
  RETURN_IF_ERROR(ReadTokenArrays(f, tokens.size(), &scores, &types));
  RETURN_IF_ERROR(CheckByteTokens(tokens, types));
  for (size_t id = 0; id < tokens.size(); ++id) {
    tokens[id] = PieceFromGguf(tokens[id], static_cast<int>(id));
  }
  absl::StatusOr<Tokenizer> tokenizer =
      Tokenizer::FromPieces(std::move(tokens), std::move(scores));
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: ", tokenizer.status().message()));
  }
  return std::optional<Tokenizer>(*std::move(tokenizer));
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
                   TokenizerFromMetadata(f, out.model.config.vocab_size));
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

// --- Writing ---------------------------------------------------------------

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

// The inverse of PieceFromGguf.
std::string PieceToGguf(const std::string& piece, int id) {
  if (id == kBosToken && piece == "\n<s>\n") return "<s>";
  if (id == kEosToken && piece == "\n</s>\n") return "</s>";
  return absl::StrReplaceAll(piece, {{" ", kSentencePieceSpace}});
}

int32_t TokenTypeOf(int id) {
  if (id == 0) return kUnknownToken;
  if (id == kBosToken || id == kEosToken) return kControlToken;
  if (id >= kFirstByteToken && id < kFirstByteToken + 256) return kByteToken;
  return kNormalToken;
}

void AddTokenizer(const Tokenizer& tokenizer, gguf::File* f) {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int id = 0; id < tokenizer.vocab_size(); ++id) {
    tokens.push_back(PieceToGguf(tokenizer.piece(id), id));
    scores.push_back(tokenizer.score(id));
    types.push_back(TokenTypeOf(id));
  }
  using gguf::Value;
  f->metadata.insert(
      f->metadata.end(),
      {{"tokenizer.ggml.model", Value::String("llama")},
       {"tokenizer.ggml.tokens", Value::StringArray(std::move(tokens))},
       {"tokenizer.ggml.scores", Value::Float32Array(scores)},
       {"tokenizer.ggml.token_type", Value::Int32Array(types)},
       {"tokenizer.ggml.unknown_token_id", Value::Uint32(0)},
       {"tokenizer.ggml.bos_token_id", Value::Uint32(kBosToken)},
       {"tokenizer.ggml.eos_token_id", Value::Uint32(kEosToken)}});
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
  if (tokenizer != nullptr) AddTokenizer(*tokenizer, &f);
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
