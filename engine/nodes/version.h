// The engine's version: one constant, reported by the router's GET /version
// (and its Server header) and by every node's GET /internal/v1/limits.
#ifndef KVCANARY_ENGINE_NODES_VERSION_H_
#define KVCANARY_ENGINE_NODES_VERSION_H_

namespace kvcanary::engine {

inline constexpr char kEngineName[] = "kvcanary";
inline constexpr char kEngineVersion[] = "0.1.0";

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_VERSION_H_
