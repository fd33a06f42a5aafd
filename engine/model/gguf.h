// GGUF, the model file format of ggml and llama.cpp (docs/gguf.md): the
// container only — the header, the metadata key-value pairs, the tensor
// infos and where each tensor's bytes lie. What the keys and tensors mean
// for a llama model is engine/model/gguf_model.h.
//
// Version 3, little-endian:
//   "GGUF", u32 version, u64 tensor_count, u64 metadata_kv_count,
//   metadata: (string key, u32 value_type, value) * metadata_kv_count,
//   tensor infos: (string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type,
//                  u64 offset) * tensor_count,
//   zero padding to general.alignment (default 32), then the tensor data;
//   each tensor's offset is from the start of the data and aligned.
// A string is a u64 byte length then the bytes; an array is a u32 element
// type, a u64 count, then the elements.
#ifndef KVCANARY_ENGINE_MODEL_GGUF_H_
#define KVCANARY_ENGINE_MODEL_GGUF_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvcanary::engine::gguf {

inline constexpr uint32_t kVersion = 3;
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr uint32_t kMaxDims = 4;            // GGML_MAX_DIMS
inline constexpr size_t kMaxTensorNameBytes = 64;  // GGML_MAX_NAME
inline constexpr size_t kMaxKeyBytes = 65535;

enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* ValueTypeName(ValueType type);

// The tensor types the engine reads, as ggml_type ids. Any other id is
// refused by name (GgmlTypeName).
enum class TensorType : uint32_t { kF32 = 0, kF16 = 1, kQ8_0 = 8 };
// "F32", "Q4_K", "BF16", ... for every ggml_type id the spec lists; "type N"
// for others.
std::string GgmlTypeName(uint32_t type);

// One metadata value. Scalars (integers, bools, floats) are held as the
// bits of their little-endian encoding, zero-extended to 64 bits; arrays of
// them likewise, one entry per element. Nested arrays are not supported.
struct Value {
  ValueType type = ValueType::kUint32;
  uint64_t bits = 0;                           // scalars
  std::string string;                          // kString
  ValueType element_type = ValueType::kUint8;  // kArray
  std::vector<uint64_t> numbers;               // kArray of scalars
  std::vector<std::string> strings;            // kArray of kString

  static Value Uint32(uint32_t v);
  static Value Float32(float v);
  static Value String(std::string v);
  static Value StringArray(std::vector<std::string> v);
  static Value Float32Array(const std::vector<float>& v);
  static Value Int32Array(const std::vector<int32_t>& v);

  bool is_array() const { return type == ValueType::kArray; }
  uint64_t array_size() const;
};

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // ne[0] first: ne[0] is the row length
  TensorType type = TensorType::kF32;
  uint64_t offset = 0;  // from the start of the tensor data

  uint64_t num_elements() const;
  uint64_t size_bytes() const;
};

struct File {
  std::vector<std::pair<std::string, Value>> metadata;  // in file order
  std::vector<TensorInfo> tensors;                      // in file order
  // Where the tensor data starts in the file; Decode and EncodeTo set it.
  uint64_t data_offset = 0;

  // general.alignment, or kDefaultAlignment without it. Decode guarantees
  // that a present one is a u32 power of two.
  uint32_t alignment() const;
  const Value* Find(absl::string_view key) const;
  const TensorInfo* FindTensor(absl::string_view name) const;

  // Typed lookups. kInvalidArgument "missing metadata key 'K'" when absent,
  // or naming the key and both types when it has another type. GetUint
  // takes any integer type holding a non-negative value; GetFloat f32 or
  // f64.
  absl::StatusOr<uint64_t> GetUint(absl::string_view key) const;
  absl::StatusOr<double> GetFloat(absl::string_view key) const;
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(
      absl::string_view key) const;
  absl::StatusOr<std::vector<float>> GetFloat32Array(
      absl::string_view key) const;
  // Any integer element type, as int64.
  absl::StatusOr<std::vector<int64_t>> GetIntArray(absl::string_view key) const;

  // Sets each tensor's offset so they follow each other in order, each
  // padded to the alignment; returns the size of the tensor data.
  uint64_t LayOutTensors();
  // Appends the header, metadata, tensor infos and the zero padding up to
  // the tensor data; sets data_offset. The tensor data is the caller's.
  void EncodeTo(std::string* out);

  // Decodes the GGUF file `bytes` (all of it: the tensor data is checked to
  // lie inside). Never crashes and allocates no more than a small multiple
  // of bytes.size() on any input. Errors:
  //   kDataLoss: truncated (header, metadata, infos, padding or a tensor's
  //     data beyond the end), or a count that cannot fit in what is left;
  //   kInvalidArgument: not a GGUF file (magic), a malformed field (bool not
  //     0/1, unknown value type, nested array, duplicate key or tensor name,
  //     general.alignment not a u32 power of two, a tensor name over 64
  //     bytes, 0 or more than 4 dims, a zero dim, a row that is not whole
  //     blocks, an offset not aligned or not where the previous tensor
  //     ends);
  //   kUnimplemented: a version other than 3, a tensor type other than F32,
  //     F16 and Q8_0 (named).
  static absl::StatusOr<File> Decode(absl::string_view bytes);
};

}  // namespace kvcanary::engine::gguf

#endif  // KVCANARY_ENGINE_MODEL_GGUF_H_
