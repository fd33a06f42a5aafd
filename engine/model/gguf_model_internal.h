// What reading (gguf_model.cc) and writing (gguf_model_writer.cc) llama
// models in GGUF files share: the tensors of a llama model and where their
// values go in ModelWeights, and the constants of the kernels. Internal to
// engine/model/gguf_model*.cc.
#ifndef KVCANARY_ENGINE_MODEL_GGUF_MODEL_INTERNAL_H_
#define KVCANARY_ENGINE_MODEL_GGUF_MODEL_INTERNAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/model.h"

namespace kvcanary::engine::gguf_model_internal {

// The kernels' constants (kernels/cpu_kernels.h): a file asking for others
// is refused rather than run wrongly.
inline constexpr float kRmsEpsilon = 1e-5f;
inline constexpr double kRopeBase = 10000.0;

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
std::vector<TensorSlot> LlamaTensorSlots(const ModelConfig& c);

// `s` with `name` (a path) before its message.
absl::Status Prefixed(const std::string& name, const absl::Status& s);

}  // namespace kvcanary::engine::gguf_model_internal

#endif  // KVCANARY_ENGINE_MODEL_GGUF_MODEL_INTERNAL_H_
