// Small GGUF files built in memory for the GGUF tests: a tiny llama model
// the engine writes itself, and its header taken apart and put back
// together around the same tensor data.
#ifndef KVCANARY_TESTS_ENGINE_GGUF_TEST_UTIL_H_
#define KVCANARY_TESTS_ENGINE_GGUF_TEST_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_model.h"
#include "engine/model/model.h"
#include "engine/model/tokenizer.h"
#include "gtest/gtest.h"

namespace kvcanary::engine::testing {

// dim 32 (Q8_0 rows), hidden 48 (ffn_down's rows of 48 stay F16 in Q8_0),
// 2 layers, 4 heads, 2 KV heads, vocab 354 (Tokenizer::Default's least),
// context 64, its own classifier.
inline ModelConfig TinyGgufConfig() {
  ModelConfig c;
  c.dim = 32;
  c.hidden_dim = 48;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 354;
  c.seq_len = 64;
  c.shared_classifier = false;
  return c;
}

inline Model TinyGgufModel() { return SyntheticModel(TinyGgufConfig(), 11); }

inline std::string EncodeGguf(const Model& model, const Tokenizer* tokenizer,
                              GgufWeightType type) {
  std::string out;
  const absl::Status s =
      EncodeGgufModel(model, tokenizer, type, [&](absl::string_view bytes) {
        out.append(bytes.data(), bytes.size());
        return absl::OkStatus();
      });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// The tiny model with the default tokenizer, as GGUF bytes.
inline std::string TinyGguf(GgufWeightType type = GgufWeightType::kF32) {
  const Model model = TinyGgufModel();
  const Tokenizer tokenizer = Tokenizer::Default(model.config.vocab_size);
  return EncodeGguf(model, &tokenizer, type);
}

// A GGUF file as its decoded header and its tensor data section.
struct GgufParts {
  gguf::File file;
  std::string data;
};

inline GgufParts SplitGguf(const std::string& bytes) {
  absl::StatusOr<gguf::File> file = gguf::File::Decode(bytes);
  EXPECT_TRUE(file.ok()) << file.status();
  GgufParts parts{*file, ""};
  parts.data = bytes.substr(file->data_offset);
  return parts;
}

// The header re-encoded (offsets as they are) followed by the data.
inline std::string JoinGguf(GgufParts parts) {
  std::string out;
  parts.file.EncodeTo(&out);
  return out + parts.data;
}

// The value of metadata `key` in `parts`; CHECKs that it exists.
inline gguf::Value& MetadataValue(GgufParts& parts, absl::string_view key) {
  for (auto& [k, v] : parts.file.metadata) {
    if (k == key) return v;
  }
  ADD_FAILURE() << "no metadata key " << key;
  static gguf::Value none;
  return none;
}

inline void EraseMetadata(GgufParts& parts, absl::string_view key) {
  auto& m = parts.file.metadata;
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (it->first == key) {
      m.erase(it);
      return;
    }
  }
  ADD_FAILURE() << "no metadata key " << key;
}

inline gguf::TensorInfo& Tensor(GgufParts& parts, absl::string_view name) {
  for (gguf::TensorInfo& t : parts.file.tensors) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << "no tensor " << name;
  static gguf::TensorInfo none;
  return none;
}

}  // namespace kvcanary::engine::testing

#endif  // KVCANARY_TESTS_ENGINE_GGUF_TEST_UTIL_H_
