// The GGUF container (engine/model/gguf.h): round trips, and a clear error
// for every malformed or unsupported header.
#include "engine/model/gguf.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/wire.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/gguf_test_util.h"

namespace kvcanary::engine::gguf {
namespace {

using ::kvcanary::engine::testing::GgufParts;
using ::kvcanary::engine::testing::JoinGguf;
using ::kvcanary::engine::testing::SplitGguf;
using ::kvcanary::engine::testing::Tensor;
using ::kvcanary::engine::testing::TinyGguf;
using ::testing::HasSubstr;

Value Scalar(ValueType type, uint64_t bits) {
  Value v;
  v.type = type;
  v.bits = bits;
  return v;
}

// A file with every value type and one tensor of each supported type.
File EveryKindFile() {
  File f;
  f.metadata = {{"a.u8", Scalar(ValueType::kUint8, 200)},
                {"a.i8", Scalar(ValueType::kInt8, 0xfe)},
                {"a.u16", Scalar(ValueType::kUint16, 65000)},
                {"a.i16", Scalar(ValueType::kInt16, 0x8000)},
                {"a.u32", Value::Uint32(4000000000u)},
                {"a.i32", Scalar(ValueType::kInt32, 0xffffffffu)},
                {"a.f32", Value::Float32(0.25f)},
                {"a.bool", Scalar(ValueType::kBool, 1)},
                {"a.string", Value::String("héllo")},
                {"a.u64", Scalar(ValueType::kUint64, ~uint64_t{0})},
                {"a.i64", Scalar(ValueType::kInt64, 5)},
                {"a.f64", Scalar(ValueType::kFloat64, 0x3ff0000000000000)},
                {"a.strings", Value::StringArray({"x", "", "yz"})},
                {"a.floats", Value::Float32Array({1.0f, -2.5f})},
                {"a.ints", Value::Int32Array({-1, 7})}};
  f.tensors = {{"t.f32", {3, 2}, TensorType::kF32, 0},
               {"t.f16", {5}, TensorType::kF16, 0},
               {"t.q8_0", {64, 2}, TensorType::kQ8_0, 0}};
  return f;
}

std::string EncodeWithData(File f) {
  const uint64_t data_bytes = f.LayOutTensors();
  std::string out;
  f.EncodeTo(&out);
  return out + std::string(data_bytes, '\x01');
}

TEST(GgufFileTest, EveryValueTypeAndTensorTypeRoundTrips) {
  const std::string bytes = EncodeWithData(EveryKindFile());
  absl::StatusOr<File> f = File::Decode(bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->data_offset % 32, 0u);
  EXPECT_EQ(*f->GetUint("a.u8"), 200u);
  EXPECT_EQ(*f->GetUint("a.u32"), 4000000000u);
  EXPECT_EQ(*f->GetUint("a.u64"), ~uint64_t{0});
  EXPECT_EQ(*f->GetString("a.string"), "héllo");
  EXPECT_EQ(*f->GetFloat("a.f32"), 0.25);
  EXPECT_EQ(*f->GetFloat("a.f64"), 1.0);
  EXPECT_TRUE(*f->GetBool("a.bool"));
  EXPECT_EQ(*f->GetStringArray("a.strings"),
            (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(*f->GetFloat32Array("a.floats"), (std::vector<float>{1.0f, -2.5f}));
  EXPECT_EQ(*f->GetIntArray("a.ints"), (std::vector<int64_t>{-1, 7}));
  ASSERT_EQ(f->tensors.size(), 3u);
  EXPECT_EQ(f->tensors[0].size_bytes(), 24u);
  EXPECT_EQ(f->tensors[1].offset, 32u);
  EXPECT_EQ(f->tensors[2].offset, 64u);
  EXPECT_EQ(f->tensors[2].size_bytes(), 4u * 34);
  std::string again;
  f->EncodeTo(&again);
  EXPECT_EQ(again, bytes.substr(0, f->data_offset));
}

TEST(GgufFileTest, TypedLookupsNameTheKeyAndTheTypes) {
  absl::StatusOr<File> f = File::Decode(EncodeWithData(EveryKindFile()));
  ASSERT_TRUE(f.ok());
  EXPECT_THAT(f->GetUint("a.string").status().message(),
              HasSubstr("'a.string' is string, expected an integer"));
  EXPECT_THAT(f->GetUint("no.such").status().message(),
              HasSubstr("missing metadata key 'no.such'"));
  EXPECT_THAT(f->GetUint("a.i32").status().message(), HasSubstr("negative"));
  EXPECT_THAT(f->GetStringArray("a.floats").status().message(),
              HasSubstr("is array of f32, expected an array of string"));
  EXPECT_TRUE(absl::IsInvalidArgument(f->GetFloat("a.u8").status()));
}

TEST(GgufFileTest, AWrongMagicIsNotAGgufFile) {
  std::string bytes = TinyGguf();
  bytes[0] = 'X';
  absl::Status s = File::Decode(bytes).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("not a GGUF file"));
  // A llama2.c checkpoint starts with its dim.
  EXPECT_THAT(
      File::Decode(std::string("\x40\0\0\0\xac\0\0\0", 8)).status().message(),
      HasSubstr("not a GGUF file"));
}

TEST(GgufFileTest, VersionsOtherThanThreeAreUnimplemented) {
  for (uint32_t version : {1u, 2u, 4u, 0x03000000u}) {
    std::string bytes = TinyGguf();
    bytes.replace(4, 4, std::string(reinterpret_cast<char*>(&version), 4));
    absl::Status s = File::Decode(bytes).status();
    EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("version"));
    if (version == 0x03000000u) {
      EXPECT_THAT(s.message(), HasSubstr("big-endian"));
    }
  }
}

TEST(GgufFileTest, EveryTruncationIsDataLoss) {
  const std::string bytes = TinyGguf();
  const uint64_t data_offset = File::Decode(bytes)->data_offset;
  // Every prefix of the header, then every 97th into the tensor data.
  for (uint64_t n = 0; n < bytes.size(); n += n < data_offset + 8 ? 1 : 97) {
    absl::Status s = File::Decode(bytes.substr(0, n)).status();
    ASSERT_TRUE(absl::IsDataLoss(s)) << n << ": " << s;
    ASSERT_THAT(s.message(), HasSubstr("truncated")) << n;
  }
}

TEST(GgufFileTest, AnUnsupportedTensorTypeIsNamed) {
  GgufParts parts = SplitGguf(TinyGguf());
  Tensor(parts, "blk.1.ffn_up.weight").type = static_cast<TensorType>(12);
  absl::Status s = File::Decode(JoinGguf(parts)).status();
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("'blk.1.ffn_up.weight' has type Q4_K"));
  Tensor(parts, "blk.1.ffn_up.weight").type = static_cast<TensorType>(99);
  EXPECT_THAT(File::Decode(JoinGguf(parts)).status().message(),
              HasSubstr("type 99"));
  Tensor(parts, "blk.1.ffn_up.weight").type = static_cast<TensorType>(30);
  EXPECT_THAT(File::Decode(JoinGguf(parts)).status().message(),
              HasSubstr("BF16"));
}

TEST(GgufFileTest, AnOffsetOutOfRangeIsDataLoss) {
  GgufParts parts = SplitGguf(TinyGguf());
  parts.file.tensors.back().offset = uint64_t{1} << 40;
  absl::Status s = File::Decode(JoinGguf(parts)).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("out of range"));
  parts.file.tensors.back().offset = ~uint64_t{0} - 31;  // no wrap-around
  EXPECT_TRUE(absl::IsDataLoss(File::Decode(JoinGguf(parts)).status()));
}

TEST(GgufFileTest, MisalignedOrOverlappingOffsetsAreRefused) {
  GgufParts parts = SplitGguf(TinyGguf());
  parts.file.tensors[1].offset += 4;
  absl::Status s = File::Decode(JoinGguf(parts)).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("expected"));
  parts = SplitGguf(TinyGguf());
  parts.file.tensors[2].offset = parts.file.tensors[1].offset;  // overlap
  EXPECT_TRUE(absl::IsInvalidArgument(File::Decode(JoinGguf(parts)).status()));
}

TEST(GgufFileTest, AlignmentComesFromMetadataAndMustBeAPowerOfTwo) {
  File f = EveryKindFile();
  f.metadata.push_back({"general.alignment", Value::Uint32(64)});
  absl::StatusOr<File> decoded = File::Decode(EncodeWithData(f));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->alignment(), 64u);
  EXPECT_EQ(decoded->data_offset % 64, 0u);
  EXPECT_EQ(decoded->tensors[1].offset, 64u);
  for (const Value& bad :
       {Value::Uint32(48), Value::Uint32(0), Scalar(ValueType::kUint64, 64)}) {
    File g = EveryKindFile();
    g.metadata.push_back({"general.alignment", bad});
    std::string bytes;
    g.EncodeTo(&bytes);
    absl::Status s = File::Decode(bytes).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("general.alignment"));
  }
}

// Bytes of a header with no tensors and the metadata `kv` (raw).
std::string RawHeader(uint64_t kv_count, const std::string& kv,
                      uint64_t tensor_count = 0) {
  std::string out = "GGUF";
  PutFixed32(&out, 3);
  PutFixed64(&out, tensor_count);
  PutFixed64(&out, kv_count);
  return out + kv;
}

std::string RawString(const std::string& s) {
  std::string out;
  PutFixed64(&out, s.size());
  return out + s;
}

std::string RawScalarKv(const std::string& key, uint32_t type,
                        const std::string& value) {
  std::string out = RawString(key);
  PutFixed32(&out, type);
  return out + value;
}

TEST(GgufFileTest, MalformedMetadataIsInvalidArgument) {
  const std::string bool2 = RawScalarKv("k", 7, std::string(1, '\x02'));
  const std::string unknown_type = RawScalarKv("k", 13, "");
  std::string nested = RawString("k");
  PutFixed32(&nested, 9);
  PutFixed32(&nested, 9);
  PutFixed64(&nested, 1);
  const std::string dup = RawScalarKv("k", 0, "a") + RawScalarKv("k", 0, "b");
  const std::pair<std::string, const char*> cases[] = {
      {RawHeader(1, bool2), "bool of value 2"},
      {RawHeader(1, unknown_type), "unknown value type 13"},
      {RawHeader(1, nested), "array of arrays"},
      {RawHeader(2, dup), "duplicate metadata key 'k'"}};
  for (const auto& [bytes, message] : cases) {
    absl::Status s = File::Decode(bytes).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr(message));
  }
}

TEST(GgufFileTest, HugeCountsAreTruncationNotAllocation) {
  EXPECT_THAT(File::Decode(RawHeader(uint64_t{1} << 62, "")).status().message(),
              HasSubstr("metadata pairs cannot fit"));
  EXPECT_THAT(
      File::Decode(RawHeader(0, "", uint64_t{1} << 62)).status().message(),
      HasSubstr("tensor infos cannot fit"));
  std::string array = RawString("k");
  PutFixed32(&array, 9);  // an array
  PutFixed32(&array, 8);  // of strings
  PutFixed64(&array, uint64_t{1} << 61);
  absl::Status s = File::Decode(RawHeader(1, array)).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  std::string string = RawString("k");
  PutFixed32(&string, 8);
  PutFixed64(&string, ~uint64_t{0});
  EXPECT_TRUE(absl::IsDataLoss(File::Decode(RawHeader(1, string)).status()));
}

TEST(GgufFileTest, MalformedTensorInfosAreInvalidArgument) {
  struct Case {
    std::vector<uint64_t> dims;
    TensorType type;
    std::string name;
    const char* message;
  };
  const Case cases[] = {
      {{}, TensorType::kF32, "t", "has 0 dimensions"},
      {{1, 1, 1, 1, 1}, TensorType::kF32, "t", "has 5 dimensions"},
      {{4, 0}, TensorType::kF32, "t", "dimension 1 of 0"},
      {{uint64_t{1} << 40, uint64_t{1} << 40},
       TensorType::kF32,
       "t",
       "too many elements"},
      {{48}, TensorType::kQ8_0, "t", "not whole blocks of 32"},
      {{4}, TensorType::kF32, std::string(65, 'n'), "over the limit of 64"},
  };
  for (const Case& c : cases) {
    File f;
    f.tensors = {{c.name, c.dims, c.type, 0}};
    std::string bytes;
    f.EncodeTo(&bytes);
    absl::Status s = File::Decode(bytes + std::string(4096, '\0')).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << c.message << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
  File f;
  f.tensors = {{"t", {8}, TensorType::kF32, 0},
               {"t", {8}, TensorType::kF32, 32}};
  std::string bytes;
  f.EncodeTo(&bytes);
  EXPECT_THAT(File::Decode(bytes + std::string(64, '\0')).status().message(),
              HasSubstr("duplicate tensor 't'"));
}

}  // namespace
}  // namespace kvcanary::engine::gguf
