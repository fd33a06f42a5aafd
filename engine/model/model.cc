#include "engine/model/model.h"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"

namespace kvcanary::engine {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "llama2.c checkpoints are little-endian; add byte swapping");
static_assert(sizeof(float) == 4 && sizeof(int32_t) == 4, "f32/i32 sizes");

// The header: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size
// (negative: a separate classifier follows), seq_len; i32 each.
using Llama2cHeader = std::array<int32_t, 7>;
constexpr int64_t kHeaderBytes = 7 * 4;
static_assert(sizeof(Llama2cHeader) == kHeaderBytes, "header size");
// No checkpoint we load or write may claim more than 1 TiB.
constexpr int64_t kMaxModelBytes = int64_t{1} << 40;

// One f32 array of the checkpoint, in file order. `member` is null for the
// RoPE frequency arrays, which are stored in the file but not kept.
struct TensorSpec {
  const char* name;
  std::vector<float> ModelWeights::*member;
  int64_t count;
};

// The arrays of a checkpoint with `config` (assumed valid), in file order.
std::vector<TensorSpec> CheckpointLayout(const ModelConfig& c) {
  const int64_t dim = c.dim, hidden = c.hidden_dim, layers = c.n_layers;
  const int64_t kv_dim = c.kv_dim(), vocab = c.vocab_size;
  const int64_t freq = int64_t{c.seq_len} * (c.head_dim() / 2);
  std::vector<TensorSpec> specs = {
      {"token_embedding", &ModelWeights::token_embedding, vocab * dim},
      {"rms_att", &ModelWeights::rms_att, layers * dim},
      {"wq", &ModelWeights::wq, layers * dim * dim},
      {"wk", &ModelWeights::wk, layers * kv_dim * dim},
      {"wv", &ModelWeights::wv, layers * kv_dim * dim},
      {"wo", &ModelWeights::wo, layers * dim * dim},
      {"rms_ffn", &ModelWeights::rms_ffn, layers * dim},
      {"w1", &ModelWeights::w1, layers * hidden * dim},
      {"w2", &ModelWeights::w2, layers * dim * hidden},
      {"w3", &ModelWeights::w3, layers * hidden * dim},
      {"rms_final", &ModelWeights::rms_final, dim},
      {"freq_cis_real", nullptr, freq},
      {"freq_cis_imag", nullptr, freq},
  };
  if (!c.shared_classifier) {
    specs.push_back({"wcls", &ModelWeights::wcls, vocab * dim});
  }
  return specs;
}

// Bytes of a checkpoint with `config` (assumed valid; the bounds Validate
// enforces keep this far below 2^63).
int64_t CheckpointBytes(const ModelConfig& config) {
  int64_t floats = 0;
  for (const TensorSpec& spec : CheckpointLayout(config)) floats += spec.count;
  return kHeaderBytes + 4 * floats;
}

absl::Status ErrnoStatus(int err, const std::string& message) {
  return FileErrorStatus(err, message);
}

// Closes the FILE on scope exit (reading only; writers check fclose).
struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// Index of the first NaN or infinity in `v`, or -1. Bit test, so it holds
// whatever floating-point flags the file is compiled with.
int64_t FirstNonFinite(const std::vector<float>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    if ((bits & 0x7f800000u) == 0x7f800000u) return static_cast<int64_t>(i);
  }
  return -1;
}

absl::Status CheckRange(const char* field, int value, int max) {
  if (value < 1 || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be in [1, ", max, "], got ", value));
  }
  return absl::OkStatus();
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// Fills `out` with `count` values offset + uniform(-a, a), where `a` is first
// rounded to float. The arithmetic is in double: u (24 bits) times 2a (24
// bits) is exact there, so fused and unfused multiply-add give the same
// double, and the result is the same whatever contraction the compiler does.
void FillUniform(SplitMix64& rng, int64_t count, double a, double offset,
                 std::vector<float>& out) {
  const double af = static_cast<float>(a);
  const double two_a = 2.0 * af;
  out.resize(static_cast<size_t>(count));
  for (float& x : out) {
    const double u = static_cast<double>(rng.Next() >> 40) * 0x1p-24;
    x = static_cast<float>(offset + (u * two_a - af));
  }
}

}  // namespace

absl::Status FileErrorStatus(int err, const std::string& message) {
  std::string full = absl::StrCat(message, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(full);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(full);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(full);
    default:
      return absl::InternalError(full);
  }
}

void SizeWeights(const ModelConfig& config, ModelWeights* weights) {
  weights->wcls.clear();
  for (const TensorSpec& spec : CheckpointLayout(config)) {
    if (spec.member == nullptr) continue;
    (weights->*spec.member).resize(static_cast<size_t>(spec.count));
  }
}

absl::Status CheckWeightSizes(const Model& model) {
  const ModelConfig& config = model.config;
  RETURN_IF_ERROR(config.Validate());
  for (const TensorSpec& spec : CheckpointLayout(config)) {
    if (spec.member == nullptr) continue;
    const std::vector<float>& tensor = model.weights.*spec.member;
    if (static_cast<int64_t>(tensor.size()) != spec.count) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.name, " has ", tensor.size(),
                       " floats, config wants ", spec.count));
    }
  }
  if (config.shared_classifier && !model.weights.wcls.empty()) {
    return absl::InvalidArgumentError(
        "wcls is set but the classifier is shared");
  }
  return absl::OkStatus();
}

absl::Status ModelConfig::Validate() const {
  RETURN_IF_ERROR(CheckRange("dim", dim, 16384));
  RETURN_IF_ERROR(CheckRange("hidden_dim", hidden_dim, 65536));
  RETURN_IF_ERROR(CheckRange("n_layers", n_layers, 256));
  RETURN_IF_ERROR(CheckRange("n_heads", n_heads, dim));
  RETURN_IF_ERROR(CheckRange("n_kv_heads", n_kv_heads, n_heads));
  RETURN_IF_ERROR(CheckRange("vocab_size", vocab_size, 1 << 20));
  RETURN_IF_ERROR(CheckRange("seq_len", seq_len, 1 << 20));
  if (dim % n_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "n_heads must divide dim: dim ", dim, ", n_heads ", n_heads));
  }
  if (n_heads % n_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_kv_heads must divide n_heads: n_heads ", n_heads,
                     ", n_kv_heads ", n_kv_heads));
  }
  if (head_dim() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "head_dim (dim / n_heads) must be even, got ", head_dim()));
  }
  return absl::OkStatus();
}

std::string ModelConfig::DebugString() const {
  return absl::StrCat(
      "dim=", dim, " hidden_dim=", hidden_dim, " n_layers=", n_layers,
      " n_heads=", n_heads, " n_kv_heads=", n_kv_heads,
      " vocab_size=", vocab_size, " seq_len=", seq_len,
      " shared_classifier=", shared_classifier ? "true" : "false");
}

ModelConfig Stories260KConfig() {
  ModelConfig c;
  c.dim = 64;
  c.hidden_dim = 172;
  c.n_layers = 5;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.vocab_size = 512;
  c.seq_len = 512;
  c.shared_classifier = true;
  return c;
}

ModelConfig Stories15MShapeConfig() {
  ModelConfig c;
  c.dim = 288;
  c.hidden_dim = 768;
  c.n_layers = 6;
  c.n_heads = 6;
  c.n_kv_heads = 6;
  c.vocab_size = 32000;
  c.seq_len = 256;
  c.shared_classifier = true;
  return c;
}

namespace {

// Bytes of the regular file open as `file`.
absl::StatusOr<int64_t> RegularFileBytes(std::FILE* file,
                                         const std::string& path) {
  struct stat st;
  if (fstat(fileno(file), &st) != 0) {
    return ErrnoStatus(errno, path + ": cannot stat");
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(path + ": not a regular file");
  }
  return static_cast<int64_t>(st.st_size);
}

// The shape a checkpoint's header states, not yet validated.
ModelConfig ConfigFromHeader(const Llama2cHeader& header) {
  ModelConfig config;
  config.dim = header[0];
  config.hidden_dim = header[1];
  config.n_layers = header[2];
  config.n_heads = header[3];
  config.n_kv_heads = header[4];
  // A negative vocab_size marks a separate classifier. INT32_MIN has no
  // positive counterpart; it becomes an out-of-range vocab, which Validate
  // refuses.
  const int32_t vocab = header[5];
  config.shared_classifier = vocab > 0;
  config.vocab_size =
      vocab >= 0 ? vocab : (vocab == INT32_MIN ? INT32_MAX : -vocab);
  config.seq_len = header[6];
  return config;
}

// Reads the header of the checkpoint open as `file` (`file_bytes` long) and
// returns the valid shape it states.
absl::StatusOr<ModelConfig> ReadHeader(std::FILE* file, const std::string& path,
                                       int64_t file_bytes) {
  if (file_bytes < kHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated: expected at least ", kHeaderBytes,
                     " bytes (header), file has ", file_bytes));
  }
  Llama2cHeader header;
  if (std::fread(header.data(), 4, header.size(), file) != header.size()) {
    return absl::DataLossError(path + ": cannot read the header");
  }
  const ModelConfig config = ConfigFromHeader(header);
  if (absl::Status s = config.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": invalid header: ", s.message()));
  }
  return config;
}

// Returns an error unless a checkpoint of `file_bytes` is exactly as long as
// `config` says and no longer than the limit.
absl::Status CheckFileBytes(const std::string& path, const ModelConfig& config,
                            int64_t file_bytes) {
  const int64_t expected = CheckpointBytes(config);
  if (expected > kMaxModelBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": header describes ", expected,
                     " bytes, more than the limit of ", kMaxModelBytes));
  }
  if (file_bytes < expected) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: expected ",
                                            expected, " bytes, file has ",
                                            file_bytes));
  }
  if (file_bytes > expected) {
    return absl::DataLossError(absl::StrCat(
        path, ": trailing bytes: expected ", expected, " bytes, file has ",
        file_bytes, " (", file_bytes - expected, " trailing)"));
  }
  return absl::OkStatus();
}

// Reads the arrays after the header into `weights`, skipping the RoPE
// tables. Returns kDataLoss for a short read or a NaN or infinite weight.
absl::Status ReadTensors(std::FILE* file, const std::string& path,
                         const ModelConfig& config, ModelWeights& weights) {
  for (const TensorSpec& spec : CheckpointLayout(config)) {
    if (spec.member == nullptr) {
      if (fseeko(file, static_cast<off_t>(4 * spec.count), SEEK_CUR) != 0) {
        return ErrnoStatus(errno,
                           absl::StrCat(path, ": cannot skip ", spec.name));
      }
      continue;
    }
    std::vector<float>& tensor = weights.*spec.member;
    tensor.resize(static_cast<size_t>(spec.count));
    const size_t got = std::fread(tensor.data(), 4, tensor.size(), file);
    if (got != tensor.size()) {
      return absl::DataLossError(
          absl::StrCat(path, ": short read in ", spec.name,
                       " (file changed while loading?)"));
    }
    if (int64_t i = FirstNonFinite(tensor); i >= 0) {
      return absl::DataLossError(absl::StrCat(path, ": non-finite weight in ",
                                              spec.name, " at index ", i, " (",
                                              tensor[i], ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Model> LoadLlama2cModel(const std::string& path) {
  FilePtr file(std::fopen(path.c_str(), "rb"));
  if (file == nullptr) return ErrnoStatus(errno, path + ": cannot open");
  ASSIGN_OR_RETURN(const int64_t file_bytes,
                   RegularFileBytes(file.get(), path));
  Model model;
  model.source = path;
  ASSIGN_OR_RETURN(model.config, ReadHeader(file.get(), path, file_bytes));
  RETURN_IF_ERROR(CheckFileBytes(path, model.config, file_bytes));
  RETURN_IF_ERROR(ReadTensors(file.get(), path, model.config, model.weights));
  return model;
}

namespace {

// Returns kInvalidArgument unless a checkpoint can hold `model`: a valid
// config within the size limit, every array of the size the config gives,
// and no wcls when the classifier is shared.
absl::Status CheckWritable(const Model& model, const std::string& path) {
  if (absl::Status s = CheckWeightSizes(model); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot write model: ", s.message()));
  }
  if (CheckpointBytes(model.config) > kMaxModelBytes) {
    return absl::InvalidArgumentError(path + ": model too large to write");
  }
  return absl::OkStatus();
}

// The inverse of ConfigFromHeader.
Llama2cHeader HeaderFromConfig(const ModelConfig& config) {
  return {config.dim,
          config.hidden_dim,
          config.n_layers,
          config.n_heads,
          config.n_kv_heads,
          config.shared_classifier ? config.vocab_size : -config.vocab_size,
          config.seq_len};
}

// The RoPE tables as llama2.c's legacy export writes them.
struct RopeTables {
  std::vector<float> real;  // (seq_len, head_dim / 2), f32: cos(pos * freq_i)
  std::vector<float> imag;  // (seq_len, head_dim / 2), f32: sin(pos * freq_i)
};

RopeTables LegacyRopeTables(const ModelConfig& config) {
  const int half = config.head_dim() / 2;
  RopeTables rope;
  rope.real.resize(static_cast<size_t>(config.seq_len) * half);
  rope.imag.resize(rope.real.size());
  for (int i = 0; i < half; ++i) {
    const double freq =
        1.0 / std::pow(10000.0, static_cast<double>(2 * i) / config.head_dim());
    for (int pos = 0; pos < config.seq_len; ++pos) {
      const double angle = static_cast<double>(pos) * freq;
      rope.real[static_cast<size_t>(pos) * half + i] =
          static_cast<float>(std::cos(angle));
      rope.imag[static_cast<size_t>(pos) * half + i] =
          static_cast<float>(std::sin(angle));
    }
  }
  return rope;
}

// Writes the header and every array of `model`'s checkpoint to `f`, which it
// does not close. Returns the errno of the first failure (EIO where errno
// gives none), 0 if none. REQUIRES: CheckWritable(model) is OK.
int WriteHeaderAndArrays(std::FILE* f, const Model& model) {
  const RopeTables rope = LegacyRopeTables(model.config);
  errno = 0;
  const Llama2cHeader header = HeaderFromConfig(model.config);
  if (std::fwrite(header.data(), 4, header.size(), f) != header.size()) {
    return errno != 0 ? errno : EIO;
  }
  for (const TensorSpec& spec : CheckpointLayout(model.config)) {
    const std::vector<float>* tensor;
    if (spec.member != nullptr) {
      tensor = &(model.weights.*spec.member);
    } else {
      tensor = std::strcmp(spec.name, "freq_cis_real") == 0 ? &rope.real
                                                            : &rope.imag;
    }
    if (std::fwrite(tensor->data(), 4, tensor->size(), f) != tensor->size()) {
      return errno != 0 ? errno : EIO;
    }
  }
  return 0;
}

}  // namespace

absl::Status WriteLlama2cModel(const Model& model, const std::string& path) {
  RETURN_IF_ERROR(CheckWritable(model, path));
  // Write to a temporary next to `path`, then rename: a reader never sees a
  // half-written checkpoint.
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return ErrnoStatus(errno, tmp + ": cannot create");
  int err = WriteHeaderAndArrays(f, model);  // errno of the first failure
  if (std::fclose(f) != 0 && err == 0) err = errno != 0 ? errno : EIO;
  if (err != 0) {
    std::remove(tmp.c_str());
    return ErrnoStatus(err, path + ": cannot write");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return ErrnoStatus(err, path + ": cannot rename the temporary into place");
  }
  return absl::OkStatus();
}

Model SyntheticModel(const ModelConfig& config, uint64_t seed) {
  CHECK_OK(config.Validate());
  Model model;
  model.config = config;
  model.source = absl::StrCat("synthetic:", seed);
  SplitMix64 rng(seed);
  for (const TensorSpec& spec : CheckpointLayout(config)) {
    if (spec.member == nullptr) continue;  // RoPE tables: not generated.
    std::vector<float>& tensor = model.weights.*spec.member;
    const std::string name = spec.name;
    if (name == "token_embedding") {
      FillUniform(rng, spec.count, 1.0, 0.0, tensor);
    } else if (name.rfind("rms_", 0) == 0) {
      FillUniform(rng, spec.count, 0.1, 1.0, tensor);
    } else {
      // Matrices: w2's in_features is hidden_dim, every other one's is dim.
      const int in_features = name == "w2" ? config.hidden_dim : config.dim;
      FillUniform(rng, spec.count,
                  1.0 / std::sqrt(static_cast<double>(in_features)), 0.0,
                  tensor);
    }
  }
  return model;
}

ModelConfig DefaultModelConfig() {
  // The stories260K shape with a classifier of its own: with random weights,
  // a classifier tied to the embedding mostly predicts the input token again
  // (BOS after BOS, which ends generation at once).
  ModelConfig c = Stories260KConfig();
  c.shared_classifier = false;
  return c;
}

Model DefaultModel() {
  return SyntheticModel(DefaultModelConfig(), kDefaultModelSeed);
}

}  // namespace kvcanary::engine
