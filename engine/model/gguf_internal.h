// What the GGUF container's values (gguf.cc) and its encoding and decoding
// (gguf_codec.cc) both need. Internal to engine/model/gguf*.cc.
#ifndef KVCANARY_ENGINE_MODEL_GGUF_INTERNAL_H_
#define KVCANARY_ENGINE_MODEL_GGUF_INTERNAL_H_

#include "engine/model/gguf.h"

namespace kvcanary::engine::gguf {

// Bytes of a scalar of `type`; 0 for strings and arrays.
int ScalarBytes(ValueType type);

}  // namespace kvcanary::engine::gguf

#endif  // KVCANARY_ENGINE_MODEL_GGUF_INTERNAL_H_
