// What the prefix cache tells the outside world about its blocks, the way
// vLLM's KV cache events do (docs/nodes.md, "KV cache events"): pages stored
// under their keys, pages removed, everything cleared. The engine hands the
// events of one step to a KvEventSink as one batch; the sink (the ZMQ
// publisher in engine/kv_events/) puts them on the wire.
#ifndef KVCANARY_ENGINE_CORE_KV_CACHE_EVENT_H_
#define KVCANARY_ENGINE_CORE_KV_CACHE_EVENT_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace kvcanary::engine {

// A prefix cache key: the page's SHA-256 chain value (prefix_cache.h).
using BlockHash = std::array<uint8_t, 32>;

struct KvCacheEvent {
  enum class Type {
    kStored,      // pages entered the cache
    kRemoved,     // pages left it (evicted)
    kAllCleared,  // the cache was emptied
  };
  // Where the pages are, as vLLM names it: the page pool "GPU" (whatever
  // the kernels run on), the host tier "CPU" (engine/core/host_tier.h).
  enum class Medium { kGpu, kCpu };
  Type type = Type::kStored;
  // kStored, kRemoved: the pages' keys; kStored: in chain order.
  std::vector<BlockHash> block_hashes;
  // kStored: the key of the page before block_hashes[0]; none for a
  // prompt's first page.
  std::optional<BlockHash> parent;
  // kStored: the pages' token ids, (block_hashes.size() * page_tokens).
  std::vector<int> token_ids;
  // kStored of a request's first page: the cache_salt its keys were salted
  // with, where one applied (vLLM puts it in block 0's extra_keys).
  std::optional<std::string> cache_salt;
  Medium medium = Medium::kGpu;  // kStored, kRemoved
};

// The events of one engine step, in the order they happened. Never empty.
struct KvEventBatch {
  absl::Time time;  // when the step ended
  std::vector<KvCacheEvent> events;
};

// Where the engine sends its batches. Publish() runs on the engine thread
// and must not block on I/O.
class KvEventSink {
 public:
  virtual ~KvEventSink() = default;
  virtual void Publish(KvEventBatch batch) = 0;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_CORE_KV_CACHE_EVENT_H_
