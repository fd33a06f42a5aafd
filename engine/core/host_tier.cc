#include "engine/core/host_tier.h"

#include <cstring>

#include "common/check.h"

namespace kvcanary::engine {

size_t HostTier::KeyHash::operator()(const Key& k) const {
  size_t h;
  std::memcpy(&h, k.data(), sizeof(h));  // already uniformly distributed
  return h;
}

HostTier::HostTier(int capacity_pages) : capacity_pages_(capacity_pages) {
  CHECK_GT(capacity_pages, 0);
}

std::shared_ptr<HostTier::Page> HostTier::Capture(const PagePool& pool,
                                                  PageId page) {
  const size_t page_bytes = pool.layout().page_bytes();
  auto copy = std::make_shared<Page>();
  copy->bytes.resize(page_bytes * pool.n_layers());
  for (int l = 0; l < pool.n_layers(); ++l) {
    std::memcpy(copy->bytes.data() + l * page_bytes,
                pool.layout().page(pool.layer_base(l), page), page_bytes);
  }
  const PageStamp& stamp = pool.stamp(0, page);
  copy->writer = stamp.writer;
  copy->shared = stamp.shared();
  copy->filled = stamp.filled;
  return copy;
}

bool HostTier::Check(const PagePool& pool, const Page& copy) {
  const size_t page_bytes = pool.layout().page_bytes();
  CHECK_EQ(copy.bytes.size(), page_bytes * pool.n_layers())
      << "a host tier copy of another geometry";
  CHECK_LE(copy.filled, static_cast<uint32_t>(pool.page_tokens()));
  for (int l = 0; l < pool.n_layers(); ++l) {
    PageStamp s;
    std::memcpy(&s, copy.bytes.data() + l * page_bytes, sizeof(s));
    if (s.magic != PageStamp::kMagic || s.layer != l ||
        s.writer.tenant != copy.writer.tenant ||
        s.writer.request != copy.writer.request || s.shared() != copy.shared ||
        s.filled != copy.filled) {
      return false;
    }
  }
  return copy.writer.tenant != kNoTenant;
}

void HostTier::Restore(const Page& copy, PagePool* pool, PageRef ref) {
  const KvPageLayout& layout = pool->layout();
  const size_t page_bytes = layout.page_bytes();
  CHECK(pool->generation(ref.page) == ref.generation);
  for (int l = 0; l < pool->n_layers(); ++l) {
    char* dst = layout.page(pool->layer_base(l), ref.page);
    const char* src = copy.bytes.data() + l * page_bytes;
    // The K/V only: the pool page keeps its own stamp (owner, page, layer).
    std::memcpy(dst + KvPageLayout::kStampBytes,
                src + KvPageLayout::kStampBytes,
                page_bytes - KvPageLayout::kStampBytes);
    PageStamp* stamp = KvPageLayout::stamp(dst);
    StampWrite(
        stamp,
        StampIdentity{copy.writer.request, copy.writer.tenant, ref.generation},
        0, copy.filled);
    stamp->set_shared(copy.shared);
  }
}

bool HostTier::Put(const Key& key, std::shared_ptr<const Page> page,
                   std::vector<Key>* evicted) {
  auto it = index_.find(key);
  const bool is_new = it == index_.end();
  if (!is_new) lru_.erase(it->second);
  lru_.push_front(Entry{key, std::move(page)});
  index_[key] = lru_.begin();
  while (static_cast<int>(lru_.size()) > capacity_pages_) {
    evicted->push_back(lru_.back().key);
    index_.erase(lru_.back().key);
    lru_.pop_back();
    ++evicted_pages_;
  }
  return is_new;
}

std::shared_ptr<const HostTier::Page> HostTier::Find(const Key& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);  // iterators stay valid
  return it->second->page;
}

}  // namespace kvcanary::engine
