// GGUF v3 bytes: File::EncodeTo (the header, metadata and tensor infos laid
// out, padded to the tensor data) and File::Decode, which checks every
// field, count and tensor offset against the file it reads.
#include <cstring>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/wire.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_internal.h"

namespace kvcanary::engine::gguf {
namespace {

constexpr absl::string_view kMagic = "GGUF";
// The smallest encodings: a metadata pair (empty key, a u8 value) and a
// tensor info (empty name, one dim).
constexpr uint64_t kMinPairBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
// No tensor may have more elements: its size in bytes then fits in 2^62.
constexpr uint64_t kMaxElements = uint64_t{1} << 60;

bool IsKnownValueType(uint32_t type) { return type <= 12; }

uint64_t AlignUp(uint64_t offset, uint64_t alignment) {
  return (offset + alignment - 1) / alignment * alignment;
}

// Bounds-checked little-endian reads over the whole file; reading past the
// end is kDataLoss naming what was being read.
class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in), wire_(in) {}

  uint64_t pos() const { return in_.size() - wire_.remaining(); }
  uint64_t remaining() const { return wire_.remaining(); }

  absl::Status Need(uint64_t n, absl::string_view what) const {
    if (n <= remaining()) return absl::OkStatus();
    return absl::DataLossError(
        absl::StrCat("truncated: ", what, " needs ", n, " bytes at offset ",
                     pos(), ", the file has ", remaining(), " left"));
  }
  absl::Status Fixed(int bytes, uint64_t* v, absl::string_view what) {
    RETURN_IF_ERROR(Need(bytes, what));
    *v = bytes == 1   ? static_cast<uint8_t>(wire_.Bytes(1)[0])
         : bytes == 2 ? wire_.Fixed16()
         : bytes == 4 ? wire_.Fixed32()
                      : wire_.Fixed64();
    return absl::OkStatus();
  }
  absl::Status U32(uint32_t* v, absl::string_view what) {
    uint64_t wide = 0;
    RETURN_IF_ERROR(Fixed(4, &wide, what));
    *v = static_cast<uint32_t>(wide);
    return absl::OkStatus();
  }
  absl::Status U64(uint64_t* v, absl::string_view what) {
    return Fixed(8, v, what);
  }
  // A u64 length then that many bytes; kDataLoss past the end of the file,
  // kInvalidArgument over `max_bytes`.
  absl::Status String(std::string* s, absl::string_view what,
                      uint64_t max_bytes) {
    uint64_t size = 0;
    RETURN_IF_ERROR(U64(&size, what));
    RETURN_IF_ERROR(Need(size, what));
    if (size > max_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " of ", size, " bytes is over the limit of ", max_bytes));
    }
    const absl::string_view bytes = wire_.Bytes(size);
    s->assign(bytes.data(), bytes.size());
    return absl::OkStatus();
  }

 private:
  absl::string_view in_;
  WireReader wire_;
};

absl::Status ReadScalar(Reader& r, ValueType type, const std::string& what,
                        uint64_t* bits) {
  RETURN_IF_ERROR(r.Fixed(ScalarBytes(type), bits, what));
  if (type == ValueType::kBool && *bits > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is a bool of value ", *bits, " (want 0 or 1)"));
  }
  return absl::OkStatus();
}

absl::Status ReadArray(Reader& r, const std::string& what, Value* v) {
  uint32_t element_type = 0;
  RETURN_IF_ERROR(r.U32(&element_type, what));
  if (!IsKnownValueType(element_type)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is an array of unknown value type ", element_type));
  }
  v->element_type = static_cast<ValueType>(element_type);
  if (v->element_type == ValueType::kArray) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is an array of arrays (not supported)"));
  }
  uint64_t count = 0;
  RETURN_IF_ERROR(r.U64(&count, what));
  const bool strings = v->element_type == ValueType::kString;
  const uint64_t min_bytes = strings ? 8 : ScalarBytes(v->element_type);
  if (count > r.remaining() / min_bytes) {
    return absl::DataLossError(absl::StrCat(
        "truncated: ", what, " has ", count, " elements of at least ",
        min_bytes, " bytes, the file has ", r.remaining(), " left"));
  }
  for (uint64_t i = 0; i < count; ++i) {
    if (strings) {
      v->strings.emplace_back();
      RETURN_IF_ERROR(r.String(&v->strings.back(), what, ~uint64_t{0}));
    } else {
      v->numbers.push_back(0);
      RETURN_IF_ERROR(ReadScalar(r, v->element_type, what, &v->numbers.back()));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadValue(Reader& r, const std::string& key, Value* v) {
  const std::string what = absl::StrCat("metadata '", key, "'");
  uint32_t type = 0;
  RETURN_IF_ERROR(r.U32(&type, what));
  if (!IsKnownValueType(type)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has unknown value type ", type));
  }
  v->type = static_cast<ValueType>(type);
  if (v->type == ValueType::kString) {
    return r.String(&v->string, what, ~uint64_t{0});
  }
  if (v->type == ValueType::kArray) return ReadArray(r, what, v);
  return ReadScalar(r, v->type, what, &v->bits);
}

// The magic, the version and both counts.
absl::Status ReadPreamble(Reader& r, uint64_t* tensor_count,
                          uint64_t* kv_count) {
  RETURN_IF_ERROR(r.Need(4, "the magic"));
  uint32_t magic = 0;
  RETURN_IF_ERROR(r.U32(&magic, "the magic"));
  if (std::memcmp(&magic, kMagic.data(), 4) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a GGUF file: it starts with 0x", absl::Hex(magic, absl::kZeroPad8),
        " (little-endian u32), not \"GGUF\""));
  }
  uint32_t version = 0;
  RETURN_IF_ERROR(r.U32(&version, "the version"));
  if (version != kVersion) {
    return absl::UnimplementedError(absl::StrCat(
        "GGUF version ", version, " is not supported (only ", kVersion,
        version == 0x03000000 ? "; this looks like a big-endian file)" : ")"));
  }
  RETURN_IF_ERROR(r.U64(tensor_count, "the tensor count"));
  return r.U64(kv_count, "the metadata count");
}

absl::Status ReadMetadata(Reader& r, uint64_t count, File* f) {
  if (count > r.remaining() / kMinPairBytes) {
    return absl::DataLossError(
        absl::StrCat("truncated: ", count, " metadata pairs cannot fit in the ",
                     r.remaining(), " bytes left"));
  }
  absl::flat_hash_set<std::string> keys;
  for (uint64_t i = 0; i < count; ++i) {
    std::string key;
    RETURN_IF_ERROR(r.String(&key, "a metadata key", kMaxKeyBytes));
    if (!keys.insert(key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate metadata key '", key, "'"));
    }
    Value value;
    RETURN_IF_ERROR(ReadValue(r, key, &value));
    f->metadata.emplace_back(std::move(key), std::move(value));
  }
  return absl::OkStatus();
}

absl::Status CheckAlignment(const File& f) {
  const Value* v = f.Find("general.alignment");
  if (v == nullptr) return absl::OkStatus();
  if (v->type != ValueType::kUint32 || v->bits == 0 ||
      (v->bits & (v->bits - 1)) != 0) {
    return absl::InvalidArgumentError(
        "general.alignment must be a u32 power of two");
  }
  return absl::OkStatus();
}

absl::Status ReadDims(Reader& r, TensorInfo* t) {
  const std::string what = absl::StrCat("tensor '", t->name, "'");
  uint32_t n_dims = 0;
  RETURN_IF_ERROR(r.U32(&n_dims, what));
  if (n_dims < 1 || n_dims > kMaxDims) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " has ", n_dims, " dimensions (want 1 to ", kMaxDims, ")"));
  }
  uint64_t elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t dim = 0;
    RETURN_IF_ERROR(r.U64(&dim, what));
    if (dim == 0 || dim > kMaxElements / elements) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has dimension ", d, " of ", dim,
                       dim == 0 ? "" : ": too many elements"));
    }
    elements *= dim;
    t->dims.push_back(dim);
  }
  return absl::OkStatus();
}

absl::Status ReadTensorType(Reader& r, TensorInfo* t) {
  uint32_t type = 0;
  RETURN_IF_ERROR(r.U32(&type, "a tensor type"));
  if (type != static_cast<uint32_t>(TensorType::kF32) &&
      type != static_cast<uint32_t>(TensorType::kF16) &&
      type != static_cast<uint32_t>(TensorType::kQ8_0)) {
    return absl::UnimplementedError(absl::StrCat(
        "tensor '", t->name, "' has type ", GgmlTypeName(type), " (", type,
        "), which is not supported (F32, F16 and Q8_0 are)"));
  }
  t->type = static_cast<TensorType>(type);
  if (t->type == TensorType::kQ8_0 && t->dims[0] % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t->name, "' is Q8_0 with rows of ", t->dims[0],
                     " values, not whole blocks of 32"));
  }
  return absl::OkStatus();
}

absl::Status ReadTensorInfos(Reader& r, uint64_t count, File* f) {
  if (count > r.remaining() / kMinTensorInfoBytes) {
    return absl::DataLossError(absl::StrCat("truncated: ", count,
                                            " tensor infos cannot fit in the ",
                                            r.remaining(), " bytes left"));
  }
  absl::flat_hash_set<std::string> names;
  for (uint64_t i = 0; i < count; ++i) {
    TensorInfo t;
    RETURN_IF_ERROR(r.String(&t.name, "a tensor name", kMaxTensorNameBytes));
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate tensor '", t.name, "'"));
    }
    RETURN_IF_ERROR(ReadDims(r, &t));
    RETURN_IF_ERROR(ReadTensorType(r, &t));
    RETURN_IF_ERROR(r.U64(&t.offset, "a tensor offset"));
    f->tensors.push_back(std::move(t));
  }
  return absl::OkStatus();
}

// The tensor data: where it starts, and each tensor aligned, inside the
// file, and right after the one before it (as llama.cpp's gguf.cpp
// requires), so none overlaps another.
absl::Status CheckTensorData(uint64_t infos_end, uint64_t file_bytes, File* f) {
  const uint64_t alignment = f->alignment();
  f->data_offset = AlignUp(infos_end, alignment);
  if (f->tensors.empty()) return absl::OkStatus();
  if (f->data_offset > file_bytes) {
    return absl::DataLossError(
        absl::StrCat("truncated: the tensor data starts at offset ",
                     f->data_offset, ", the file has ", file_bytes, " bytes"));
  }
  const uint64_t data_bytes = file_bytes - f->data_offset;
  uint64_t expected = 0;
  for (const TensorInfo& t : f->tensors) {
    const uint64_t size = t.size_bytes();
    if (t.offset > data_bytes || size > data_bytes - t.offset) {
      return absl::DataLossError(absl::StrCat(
          "tensor '", t.name, "' needs ", size, " bytes at data offset ",
          t.offset, " but the file has ", data_bytes,
          " bytes of tensor data (offset out of range or file truncated)"));
    }
    if (t.offset % alignment != 0 || t.offset != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", t.name, "' is at data offset ", t.offset, ", expected ",
          expected, " (tensors follow each other in order, ",
          "each padded to the alignment of ", alignment, ")"));
    }
    expected = AlignUp(t.offset + size, alignment);
  }
  return absl::OkStatus();
}

void PutString(std::string* out, absl::string_view s) {
  PutFixed64(out, s.size());
  out->append(s.data(), s.size());
}

void PutScalar(std::string* out, ValueType type, uint64_t bits) {
  for (int i = 0; i < ScalarBytes(type); ++i) {
    out->push_back(static_cast<char>(bits >> (8 * i)));
  }
}

void PutValue(std::string* out, const Value& v) {
  PutFixed32(out, static_cast<uint32_t>(v.type));
  if (v.type == ValueType::kString) return PutString(out, v.string);
  if (v.type != ValueType::kArray) return PutScalar(out, v.type, v.bits);
  PutFixed32(out, static_cast<uint32_t>(v.element_type));
  PutFixed64(out, v.array_size());
  for (const std::string& s : v.strings) PutString(out, s);
  for (uint64_t bits : v.numbers) PutScalar(out, v.element_type, bits);
}

}  // namespace

uint64_t File::LayOutTensors() {
  uint64_t offset = 0;
  for (TensorInfo& t : tensors) {
    t.offset = offset;
    offset = AlignUp(offset + t.size_bytes(), alignment());
  }
  return offset;
}

void File::EncodeTo(std::string* out) {
  const size_t start = out->size();
  out->append(kMagic.data(), kMagic.size());
  PutFixed32(out, kVersion);
  PutFixed64(out, tensors.size());
  PutFixed64(out, metadata.size());
  for (const auto& [key, value] : metadata) {
    PutString(out, key);
    PutValue(out, value);
  }
  for (const TensorInfo& t : tensors) {
    PutString(out, t.name);
    PutFixed32(out, static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) PutFixed64(out, d);
    PutFixed32(out, static_cast<uint32_t>(t.type));
    PutFixed64(out, t.offset);
  }
  data_offset = AlignUp(out->size() - start, alignment());
  out->resize(start + data_offset, '\0');
}

absl::StatusOr<File> File::Decode(absl::string_view bytes) {
  Reader r(bytes);
  uint64_t tensor_count = 0, kv_count = 0;
  RETURN_IF_ERROR(ReadPreamble(r, &tensor_count, &kv_count));
  File f;
  RETURN_IF_ERROR(ReadMetadata(r, kv_count, &f));
  RETURN_IF_ERROR(CheckAlignment(f));
  RETURN_IF_ERROR(ReadTensorInfos(r, tensor_count, &f));
  RETURN_IF_ERROR(CheckTensorData(r.pos(), bytes.size(), &f));
  return f;
}

}  // namespace kvcanary::engine::gguf
