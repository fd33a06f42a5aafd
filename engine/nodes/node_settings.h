// What a prefill or decode node runs with, as it reports it to the router at
// GET /internal/v1/limits (docs/nodes.md), and what the router makes of the
// reports of all its nodes: the limits it admits against and the settings
// GET /version states (docs/api.md).
#ifndef KVCANARY_ENGINE_NODES_NODE_SETTINGS_H_
#define KVCANARY_ENGINE_NODES_NODE_SETTINGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {

struct EngineOptions;

// One node's report.
struct NodeSettings {
  int max_prompt_tokens = 0;
  int context_tokens = 0;
  int page_tokens = 0;
  std::string watermark;     // off | detect | enforce
  std::string prefix_cache;  // tenant | global | off
  std::string cache_salt;    // ignore | scoped | client
  int host_tier_pages = 0;   // the host KV tier's size; 0 none
  // The first KV tier, the page pool: num_pages x page_tokens.
  int kv_cache_tokens = 0;
  std::string free_list;     // lifo | fifo: which free KV page goes next
  std::string numerics;      // invariant | variant: the matmuls' arithmetic
  std::string kv_checksum;   // crc32c: every KV page frame carries one
  std::string trace_format;  // kvt2
  std::string version;       // the node binary's kEngineVersion

  // What the node runs with: `engine`, its page pool's `num_pages` (as
  // resolved: PoolOptionsFor) and its own prompt limit.
  static NodeSettings Of(const EngineOptions& engine, int num_pages,
                         int max_prompt_tokens, int context_tokens);
  nlohmann::json ToJson() const;
  // kDataLoss unless max_prompt_tokens and context_tokens are integers;
  // the other fields are optional (an older node leaves them out: "" / 0).
  static absl::StatusOr<NodeSettings> FromJson(const nlohmann::json& j);
};

// What the router serves with, from its nodes' reports.
struct ServingSettings {
  int max_prompt_tokens = 0;         // smallest over all nodes
  int decode_max_prompt_tokens = 0;  // smallest over the decode nodes
  int context_tokens = 0;            // smallest over all nodes
  int page_tokens = 0;               // smallest over all nodes
  // The least protective over the nodes that apply it: watermark over all
  // nodes (off < detect < enforce); prefix_cache over the prefill nodes,
  // where prompts are prefilled (global over tenant over off).
  std::string watermark;
  std::string prefix_cache;
  // The prefill nodes' (where prompts are cached): cache_salt the least
  // protective (client over scoped over ignore), host_tier_pages the
  // largest.
  std::string cache_salt;
  int host_tier_pages = 0;
  // The prefill nodes' first tier (page pool) in tokens, the largest: the
  // most a prompt's pages can be pushed through before they leave it.
  int kv_cache_tokens = 0;
  // lifo or fifo if every node that reports one says so; "mixed" if they
  // differ; "" if none reports one (older nodes). numerics likewise.
  std::string free_list;
  std::string numerics;
  std::string kv_checksum;   // the decode nodes', which check it
  std::string trace_format;  // the nodes'
};

// REQUIRES: both non-empty.
ServingSettings CombineNodeSettings(const std::vector<NodeSettings>& prefill,
                                    const std::vector<NodeSettings>& decode);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_NODE_SETTINGS_H_
