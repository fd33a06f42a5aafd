// What the OpenAI API's body writers (openai_errors.cc,
// openai_responses.cc) share. Internal to engine/nodes/openai_*.cc.
#ifndef KVCANARY_ENGINE_NODES_OPENAI_INTERNAL_H_
#define KVCANARY_ENGINE_NODES_OPENAI_INTERNAL_H_

#include <string>

namespace kvcanary::engine::openai_internal {

// Serialises without throwing: generated text may hold invalid UTF-8 (a
// token boundary inside a code point); it becomes U+FFFD.
template <typename Json>
std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace kvcanary::engine::openai_internal

#endif  // KVCANARY_ENGINE_NODES_OPENAI_INTERNAL_H_
