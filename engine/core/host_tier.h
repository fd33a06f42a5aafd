// The host tier: a bounded store in host memory of prefix pages the page
// pool evicted (--host-tier-pages), so a later prompt with the same prefix
// copies them back (promotion) instead of recomputing them. What SGLang's
// hierarchical cache and LMCache's CPU offload do.
//
// An entry is a whole copy of one page: every layer's page bytes, the stamp
// included, under the prefix cache key of the page (prefix_cache.h; the same
// salted key unless the tier-drops-salt fault keys it by the tokens alone),
// with the writer the stamps named when it spilled. Entries go least
// recently used first when the tier is full. A promotion keeps the copy
// here too (an inclusive tier, as LMCache's is).
//
// Promotion keeps the watermark check sound: Check() refuses a copy whose
// stamps do not name the writer the entry recorded, and Restore() writes the
// K/V into a freshly allocated pool page and re-stamps it the way a
// transferred page is (Engine::InstallTransferredKv): the same writer tenant
// and request and shared flag, at the new allocation's generation. A reader
// of another tenant is then a foreign_tenant_read naming that writer.
//
// Not thread-safe; owned by the engine thread.
#ifndef KVCANARY_ENGINE_CORE_HOST_TIER_H_
#define KVCANARY_ENGINE_CORE_HOST_TIER_H_

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/ids.h"
#include "engine/core/kv_cache_event.h"
#include "engine/core/page_pool.h"

namespace kvcanary::engine {

class HostTier {
 public:
  using Key = BlockHash;

  // One page's copy. Immutable once stored.
  struct Page {
    // (n_layers, page_bytes) bytes: each layer's page as the pool held it,
    // stamp first.
    std::string bytes;
    StampIdentity writer;  // the layer-0 stamp's writer when it spilled
    bool shared = false;   // the stamp's kStampShared
    uint32_t filled = 0;   // slots the writer wrote
    // For the events: the key of the page before it (none for a prompt's
    // first page) and its token ids, (page_tokens).
    std::optional<Key> parent;
    std::vector<int> token_ids;
  };

  // REQUIRES: capacity_pages > 0.
  explicit HostTier(int capacity_pages);

  // A copy of pool page `page` (every layer) with its writer. The caller
  // fills parent and token_ids.
  static std::shared_ptr<Page> Capture(const PagePool& pool, PageId page);
  // Whether every layer's stamp in `copy` names the writer, shared flag and
  // fill the entry recorded, at its layer. A copy that fails is not
  // promoted. CHECKs that the copy has the pool's geometry.
  static bool Check(const PagePool& pool, const Page& copy);
  // Writes the copy's K/V into `ref` (just allocated) on every layer and
  // stamps it as written by the copy's writer at ref's generation, shared
  // if the copy is. REQUIRES: Check(pool, copy).
  static void Restore(const Page& copy, PagePool* pool, PageRef ref);

  // Stores `page` under `key` as the most recently used, replacing an
  // older copy; evicts the least recently used beyond capacity, appending
  // their keys to *evicted. Returns whether the key was new.
  bool Put(const Key& key, std::shared_ptr<const Page> page,
           std::vector<Key>* evicted);
  // The copy under `key`, now the most recently used; null if none.
  std::shared_ptr<const Page> Find(const Key& key);

  int size() const { return static_cast<int>(index_.size()); }
  int capacity_pages() const { return capacity_pages_; }
  uint64_t evicted_pages() const { return evicted_pages_; }

 private:
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct Entry {
    Key key;
    std::shared_ptr<const Page> page;
  };
  const int capacity_pages_;
  std::list<Entry> lru_;  // most recently used first
  absl::flat_hash_map<Key, std::list<Entry>::iterator, KeyHash> index_;
  uint64_t evicted_pages_ = 0;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_CORE_HOST_TIER_H_
