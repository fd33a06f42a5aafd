// The GGUF container in memory: metadata values, tensor infos and their
// sizes, the type names, and the typed metadata lookups. Its bytes are
// gguf_codec.cc's.
#include "engine/model/gguf.h"

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/model/gguf_internal.h"

namespace kvcanary::engine::gguf {

int ScalarBytes(ValueType type) {
  switch (type) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool:
      return 1;
    case ValueType::kUint16:
    case ValueType::kInt16:
      return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32:
      return 4;
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64:
      return 8;
    default:
      return 0;
  }
}

namespace {

bool IsSigned(ValueType type) {
  return type == ValueType::kInt8 || type == ValueType::kInt16 ||
         type == ValueType::kInt32 || type == ValueType::kInt64;
}

bool IsInteger(ValueType type) {
  return ScalarBytes(type) > 0 && type != ValueType::kBool &&
         type != ValueType::kFloat32 && type != ValueType::kFloat64;
}

// An integer scalar's bits as int64, sign-extended from its width.
int64_t SignExtend(uint64_t bits, ValueType type) {
  const int width_bits = 8 * ScalarBytes(type);
  if (!IsSigned(type) || width_bits == 64) return static_cast<int64_t>(bits);
  const uint64_t sign = uint64_t{1} << (width_bits - 1);
  return static_cast<int64_t>((bits ^ sign) - sign);
}

double FloatOf(uint64_t bits, ValueType type) {
  if (type == ValueType::kFloat32) {
    float f;
    const uint32_t b = static_cast<uint32_t>(bits);
    std::memcpy(&f, &b, 4);
    return f;
  }
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

absl::Status Missing(absl::string_view key) {
  return absl::InvalidArgumentError(
      absl::StrCat("missing metadata key '", key, "'"));
}

absl::Status WrongType(absl::string_view key, const Value& v,
                       absl::string_view want) {
  std::string type = ValueTypeName(v.type);
  if (v.is_array()) {
    type = absl::StrCat("array of ", ValueTypeName(v.element_type));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("metadata key '", key, "' is ", type, ", expected ", want));
}

}  // namespace

const char* ValueTypeName(ValueType type) {
  static constexpr const char* kNames[] = {
      "u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
      "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(type);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

std::string GgmlTypeName(uint32_t type) {
  // ggml_type as GGUF's specification lists it (ggml docs/gguf.md);
  // "" marks ids whose support was removed.
  static constexpr const char* kNames[] = {
      "F32",        "F16",        "Q4_0",       "Q4_1",     "Q4_2",    "Q4_3",
      "Q5_0",       "Q5_1",       "Q8_0",       "Q8_1",     "Q2_K",    "Q3_K",
      "Q4_K",       "Q5_K",       "Q6_K",       "Q8_K",     "IQ2_XXS", "IQ2_XS",
      "IQ3_XXS",    "IQ1_S",      "IQ4_NL",     "IQ3_S",    "IQ2_S",   "IQ4_XS",
      "I8",         "I16",        "I32",        "I64",      "F64",     "IQ1_M",
      "BF16",       "Q4_0_4_4",   "Q4_0_4_8",   "Q4_0_8_8", "TQ1_0",   "TQ2_0",
      "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
  if (type < sizeof(kNames) / sizeof(kNames[0])) return kNames[type];
  return absl::StrCat("type ", type);
}

Value Value::Uint32(uint32_t v) {
  Value out;
  out.type = ValueType::kUint32;
  out.bits = v;
  return out;
}

Value Value::Float32(float v) {
  Value out;
  out.type = ValueType::kFloat32;
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  out.bits = bits;
  return out;
}

Value Value::String(std::string v) {
  Value out;
  out.type = ValueType::kString;
  out.string = std::move(v);
  return out;
}

Value Value::StringArray(std::vector<std::string> v) {
  Value out;
  out.type = ValueType::kArray;
  out.element_type = ValueType::kString;
  out.strings = std::move(v);
  return out;
}

Value Value::Float32Array(const std::vector<float>& v) {
  Value out;
  out.type = ValueType::kArray;
  out.element_type = ValueType::kFloat32;
  for (float f : v) out.numbers.push_back(Float32(f).bits);
  return out;
}

Value Value::Int32Array(const std::vector<int32_t>& v) {
  Value out;
  out.type = ValueType::kArray;
  out.element_type = ValueType::kInt32;
  for (int32_t i : v) out.numbers.push_back(static_cast<uint32_t>(i));
  return out;
}

uint64_t Value::array_size() const {
  return element_type == ValueType::kString ? strings.size() : numbers.size();
}

uint64_t TensorInfo::num_elements() const {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  return n;
}

uint64_t TensorInfo::size_bytes() const {
  const uint64_t n = num_elements();
  switch (type) {
    case TensorType::kF32:
      return 4 * n;
    case TensorType::kF16:
      return 2 * n;
    case TensorType::kQ8_0:
      return n / 32 * 34;
  }
  return 0;
}

uint32_t File::alignment() const {
  const Value* v = Find("general.alignment");
  return v != nullptr && v->type == ValueType::kUint32 && v->bits != 0
             ? static_cast<uint32_t>(v->bits)
             : kDefaultAlignment;
}

const Value* File::Find(absl::string_view key) const {
  for (const auto& [k, v] : metadata) {
    if (k == key) return &v;
  }
  return nullptr;
}

const TensorInfo* File::FindTensor(absl::string_view name) const {
  for (const TensorInfo& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

absl::StatusOr<uint64_t> File::GetUint(absl::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (!IsInteger(v->type)) return WrongType(key, *v, "an integer");
  const int64_t value = SignExtend(v->bits, v->type);
  if (IsSigned(v->type) && value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata key '", key, "' is negative (", value, ")"));
  }
  return v->bits;
}

absl::StatusOr<double> File::GetFloat(absl::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (v->type != ValueType::kFloat32 && v->type != ValueType::kFloat64) {
    return WrongType(key, *v, "a float");
  }
  return FloatOf(v->bits, v->type);
}

absl::StatusOr<std::string> File::GetString(absl::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (v->type != ValueType::kString) return WrongType(key, *v, "a string");
  return v->string;
}

absl::StatusOr<bool> File::GetBool(absl::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (v->type != ValueType::kBool) return WrongType(key, *v, "a bool");
  return v->bits != 0;
}

absl::StatusOr<std::vector<std::string>> File::GetStringArray(
    absl::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (!v->is_array() || v->element_type != ValueType::kString) {
    return WrongType(key, *v, "an array of string");
  }
  return v->strings;
}

absl::StatusOr<std::vector<float>> File::GetFloat32Array(
    absl::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (!v->is_array() || v->element_type != ValueType::kFloat32) {
    return WrongType(key, *v, "an array of f32");
  }
  std::vector<float> out;
  out.reserve(v->numbers.size());
  for (uint64_t bits : v->numbers) {
    out.push_back(static_cast<float>(FloatOf(bits, ValueType::kFloat32)));
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> File::GetIntArray(
    absl::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (!v->is_array() || !IsInteger(v->element_type)) {
    return WrongType(key, *v, "an array of integers");
  }
  std::vector<int64_t> out;
  out.reserve(v->numbers.size());
  for (uint64_t bits : v->numbers) {
    out.push_back(SignExtend(bits, v->element_type));
  }
  return out;
}

}  // namespace kvcanary::engine::gguf
