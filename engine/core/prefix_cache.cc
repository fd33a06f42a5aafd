#include "engine/core/prefix_cache.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/random.h"
#include "common/sha256.h"
#include "common/wire.h"

namespace kvcanary::engine {
namespace {

constexpr uint32_t kFnvOffset = 2166136261u;
constexpr uint32_t kFnvPrime = 16777619u;

void AppendTokens(const int* tokens, int n, std::string* out) {
  for (int i = 0; i < n; ++i) PutFixed32(out, static_cast<uint32_t>(tokens[i]));
}

}  // namespace

const char* PrefixCacheModeName(PrefixCacheMode mode) {
  switch (mode) {
    case PrefixCacheMode::kOff:
      return "off";
    case PrefixCacheMode::kTenant:
      return "tenant";
    case PrefixCacheMode::kGlobal:
      return "global";
  }
  return "?";
}

absl::StatusOr<PrefixCacheMode> ParsePrefixCacheMode(absl::string_view name) {
  if (name == "tenant" || name == "true") return PrefixCacheMode::kTenant;
  if (name == "global") return PrefixCacheMode::kGlobal;
  if (name == "off" || name == "false") return PrefixCacheMode::kOff;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown prefix cache mode '", name, "' (want tenant, global or off)"));
}

const char* CacheSaltModeName(CacheSaltMode mode) {
  switch (mode) {
    case CacheSaltMode::kIgnore:
      return "ignore";
    case CacheSaltMode::kScoped:
      return "scoped";
    case CacheSaltMode::kClient:
      return "client";
  }
  return "?";
}

absl::StatusOr<CacheSaltMode> ParseCacheSaltMode(absl::string_view name) {
  if (name == "ignore") return CacheSaltMode::kIgnore;
  if (name == "scoped") return CacheSaltMode::kScoped;
  if (name == "client") return CacheSaltMode::kClient;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown cache salt mode '", name, "' (want ignore, scoped or client)"));
}

size_t PrefixCache::KeyHash::operator()(const Key& k) const {
  size_t h;
  std::memcpy(&h, k.data(), sizeof(h));  // already uniformly distributed
  return h;
}

PrefixCache::PrefixCache(PagePool* pool, PrefixCacheMode mode, bool weak_keys,
                         TraceBus* trace, CacheSaltMode salt_mode)
    : pool_(pool),
      mode_(mode),
      salt_mode_(salt_mode),
      weak_keys_(weak_keys),
      trace_(trace) {
  CHECK(mode != PrefixCacheMode::kOff);
  const std::string secret = RandomBytes(static_cast<int>(secret_.size()));
  std::memcpy(secret_.data(), secret.data(), secret_.size());
}

uint32_t PrefixCache::WeakHash(uint32_t parent, const int* tokens, int n) {
  uint32_t h = parent == 0 ? kFnvOffset : parent;
  for (int i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(tokens[i]);
    h *= kFnvPrime;
  }
  return h;
}

std::optional<std::string> PrefixCache::AppliedSalt(
    absl::string_view cache_salt) const {
  if (cache_salt.empty() || salt_mode_ == CacheSaltMode::kIgnore) {
    return std::nullopt;
  }
  return std::string(cache_salt);
}

PrefixCache::Key PrefixCache::Salt(TenantId tenant,
                                   absl::string_view cache_salt) const {
  constexpr uint32_t kNoTenantBase = 0xffffffffu;  // client: no tenant
  std::string in(reinterpret_cast<const char*>(secret_.data()), secret_.size());
  const std::optional<std::string> salt = AppliedSalt(cache_salt);
  if (salt.has_value() && salt_mode_ == CacheSaltMode::kClient) {
    PutFixed32(&in, kNoTenantBase);
    in += *salt;
    return Sha256(in);
  }
  // Global mode: one salt for everybody (tenant 0 names nobody).
  PutFixed32(&in, mode_ == PrefixCacheMode::kGlobal ? kNoTenant.value()
                                                    : tenant.value());
  if (salt.has_value()) {  // scoped: within the tenant's own space
    PutFixed32(&in, 1);
    in += *salt;
  }
  return Sha256(in);
}

std::vector<PrefixCache::Key> PrefixCache::Keys(TenantId tenant,
                                                absl::string_view cache_salt,
                                                const std::vector<int>& tokens,
                                                int num_pages) const {
  const int pt = pool_->page_tokens();
  CHECK_LE(num_pages * pt, static_cast<int>(tokens.size()));
  std::vector<Key> keys;
  keys.reserve(num_pages);
  if (weak_keys_) {
    // The fault: 32 bits, a constant seed, no tenant.
    uint32_t h = 0;
    for (int p = 0; p < num_pages; ++p) {
      h = WeakHash(h, tokens.data() + p * pt, pt);
      Key k{};
      std::memcpy(k.data(), &h, sizeof(h));
      keys.push_back(k);
    }
    return keys;
  }
  Key parent = Salt(tenant, cache_salt);
  std::string in;
  for (int p = 0; p < num_pages; ++p) {
    in.assign(reinterpret_cast<const char*>(parent.data()), parent.size());
    AppendTokens(tokens.data() + p * pt, pt, &in);
    const Key k = Sha256(in);
    keys.push_back(k);
    parent = k;
  }
  return keys;
}

void PrefixCache::EnableHostTier(int capacity_pages, bool drops_salt) {
  CHECK(tier_ == nullptr);
  CHECK(entries_.empty());
  tier_ = std::make_unique<HostTier>(capacity_pages);
  tier_drops_salt_ = drops_salt;
}

std::vector<PrefixCache::Key> PrefixCache::TierKeys(
    TenantId tenant, absl::string_view cache_salt,
    const std::vector<int>& tokens, int num_pages) const {
  if (!tier_drops_salt_) return Keys(tenant, cache_salt, tokens, num_pages);
  // The fault: a SHA-256 chain over the tokens alone, from zeros.
  const int pt = pool_->page_tokens();
  CHECK_LE(num_pages * pt, static_cast<int>(tokens.size()));
  std::vector<Key> keys;
  Key parent{};
  std::string in;
  for (int p = 0; p < num_pages; ++p) {
    in.assign(reinterpret_cast<const char*>(parent.data()), parent.size());
    AppendTokens(tokens.data() + p * pt, pt, &in);
    parent = Sha256(in);
    keys.push_back(parent);
  }
  return keys;
}

std::vector<PageRef> PrefixCache::Acquire(const std::vector<Key>& keys) {
  std::vector<PageRef> pages;
  for (const Key& key : keys) {
    auto it = entries_.find(key);
    if (it == entries_.end()) break;
    Entry& e = it->second;
    ++e.users;
    e.last_used = ++tick_;
    pages.push_back(e.page);
  }
  hit_pages_ += pages.size();
  return pages;
}

int PrefixCache::PromoteFromTier(const std::vector<Key>& keys, TenantId tenant,
                                 RequestId request,
                                 const std::vector<int>& tokens,
                                 absl::string_view cache_salt,
                                 std::vector<PageRef>* pages) {
  if (tier_ == nullptr || pages->size() >= keys.size()) return 0;
  const std::vector<Key> tier_keys =
      tier_drops_salt_
          ? TierKeys(tenant, cache_salt, tokens, static_cast<int>(keys.size()))
          : keys;
  const size_t start = pages->size();
  for (size_t i = start; i < keys.size(); ++i) {
    // The pool may still hold a later page of a prefix whose earlier one
    // it evicted (least recently used goes first).
    if (auto it = entries_.find(keys[i]); it != entries_.end()) {
      ++it->second.users;
      it->second.last_used = ++tick_;
      pages->push_back(it->second.page);
      continue;
    }
    const std::optional<PageRef> page =
        Promote(keys, tier_keys, i, tenant, request, cache_salt);
    if (!page.has_value()) break;
    pages->push_back(*page);
  }
  const int added = static_cast<int>(pages->size() - start);
  hit_pages_ += added;
  return added;
}

std::optional<PageRef> PrefixCache::Promote(const std::vector<Key>& keys,
                                            const std::vector<Key>& tier_keys,
                                            size_t i, TenantId tenant,
                                            RequestId request,
                                            absl::string_view cache_salt) {
  // Held here: making room below may spill and push it out of the tier.
  const std::shared_ptr<const HostTier::Page> copy = tier_->Find(tier_keys[i]);
  if (copy == nullptr) return std::nullopt;
  ++tier_hit_pages_;
  if (!HostTier::Check(*pool_, *copy)) {
    ++tier_refused_pages_;
    return std::nullopt;
  }
  if (!pool_->CanAllocate(1) && !MakeRoom(1)) return std::nullopt;
  const PageRef ref = pool_->Allocate(tenant, request, 1).front();
  HostTier::Restore(*copy, pool_, ref);
  if (trace_ != nullptr) TracePromotion(ref, *copy);
  Entry e;
  e.page = ref;
  e.tenant = tenant;
  e.users = 1;
  e.last_used = ++tick_;
  e.tier_key = tier_keys[i];
  if (i > 0) {
    e.tier_parent = tier_keys[i - 1];
  } else {
    e.tier_salt = TierSalt(cache_salt);
  }
  e.tokens = copy->token_ids;
  CHECK(entries_.emplace(keys[i], std::move(e)).second);
  CHECK(key_of_page_.emplace(ref.page.value(), keys[i]).second);
  ++promoted_pages_;
  if (record_events_) {
    KvCacheEvent ev;
    ev.type = KvCacheEvent::Type::kStored;
    ev.block_hashes = {keys[i]};
    if (i > 0) {
      ev.parent = keys[i - 1];
    } else {
      ev.cache_salt = AppliedSalt(cache_salt);
    }
    ev.token_ids = copy->token_ids;
    events_.push_back(std::move(ev));
  }
  return ref;
}

void PrefixCache::TracePromotion(PageRef ref, const HostTier::Page& copy) {
  TraceEvent w;
  w.type = TraceEventType::kPageWrite;
  w.page = ref.page;
  w.gen = ref.generation;
  w.tenant = copy.writer.tenant;
  w.request = copy.writer.request;
  w.first_slot = 0;
  w.last_slot_exclusive = copy.filled;
  w.writer_gen = ref.generation;
  trace_->Emit(w);
  if (!copy.shared) return;
  TraceEvent share;
  share.type = TraceEventType::kPageShare;
  share.page = ref.page;
  share.gen = ref.generation;
  share.tenant = copy.writer.tenant;
  share.request = copy.writer.request;
  trace_->Emit(share);
}

int PrefixCache::PublishRun(const std::vector<Key>& keys, int first,
                            const std::vector<PageRef>& pages,
                            const std::vector<int>& tokens, TenantId tenant,
                            bool as_computed, absl::string_view cache_salt) {
  const int n = static_cast<int>(keys.size());
  const int pt = pool_->page_tokens();
  CHECK_LE(n, static_cast<int>(pages.size()));
  CHECK_LE(n * pt, static_cast<int>(tokens.size()));
  std::vector<Key> tier_keys;
  if (tier_ != nullptr) {
    tier_keys =
        tier_drops_salt_ ? TierKeys(tenant, cache_salt, tokens, n) : keys;
  }
  int end = first;
  while (end < n && Insert(keys[end], pages[end], tenant, as_computed)) {
    if (tier_ != nullptr) {
      NoteTierKey(keys[end], tier_keys, end, tokens, cache_salt);
    }
    ++end;
  }
  if (record_events_ && end > first) {
    KvCacheEvent e;
    e.type = KvCacheEvent::Type::kStored;
    e.block_hashes.assign(keys.begin() + first, keys.begin() + end);
    if (first > 0) {
      e.parent = keys[first - 1];
    } else {
      e.cache_salt = AppliedSalt(cache_salt);
    }
    e.token_ids.assign(tokens.begin() + first * pt, tokens.begin() + end * pt);
    events_.push_back(std::move(e));
  }
  return end - first;
}

bool PrefixCache::Insert(const Key& key, PageRef page, TenantId tenant,
                         bool as_computed) {
  if (entries_.contains(key)) return false;
  CHECK(!key_of_page_.contains(page.page.value()))
      << "page " << page.page << " is cached twice";
  CHECK(pool_->generation(page.page) == page.generation);
  Entry e;
  e.page = page;
  e.tenant = tenant;
  e.users = 1;  // the request that computed it
  e.last_used = ++tick_;
  entries_.emplace(key, e);
  key_of_page_.emplace(page.page.value(), key);
  ++published_pages_;
  const RequestId writer = MarkShared(page, tenant, as_computed);
  if (trace_ != nullptr) {
    TraceEvent ev;
    ev.type = TraceEventType::kPageShare;
    ev.page = page.page;
    ev.gen = page.generation;
    ev.tenant = tenant;
    ev.request = writer;
    trace_->Emit(ev);
  }
  return true;
}

void PrefixCache::NoteTierKey(const Key& key, const std::vector<Key>& tier_keys,
                              int i, const std::vector<int>& tokens,
                              absl::string_view cache_salt) {
  const int pt = pool_->page_tokens();
  Entry& e = entries_.at(key);
  e.tier_key = tier_keys[i];
  if (i > 0) {
    e.tier_parent = tier_keys[i - 1];
  } else {
    e.tier_salt = TierSalt(cache_salt);
  }
  e.tokens.assign(tokens.begin() + i * pt, tokens.begin() + (i + 1) * pt);
}

RequestId PrefixCache::MarkShared(PageRef page, TenantId tenant,
                                  bool as_computed) {
  // The writer stays the request that computed the page; the flag says any
  // request of its tenant may read it in this allocation.
  RequestId writer;
  for (int l = 0; l < pool_->n_layers(); ++l) {
    PageStamp* stamp = KvPageLayout::stamp(
        pool_->layout().page(pool_->layer_base(l), page.page));
    writer = stamp->writer.request;
    if (as_computed && stamp->writer.tenant != tenant) continue;
    CHECK(stamp->writer.tenant == tenant);
    stamp->set_shared(true);
  }
  return writer;
}

std::vector<KvCacheEvent> PrefixCache::TakeEvents() {
  std::vector<KvCacheEvent> out;
  out.swap(events_);
  return out;
}

void PrefixCache::Unref(PageRef page) {
  auto kit = key_of_page_.find(page.page.value());
  CHECK(kit != key_of_page_.end()) << "page " << page.page << " is not cached";
  Entry& e = entries_.at(kit->second);
  CHECK(e.page.generation == page.generation);
  CHECK_GT(e.users, 0);
  --e.users;
}

int PrefixCache::num_unused() const {
  int n = 0;
  for (const auto& [key, e] : entries_) n += e.users == 0;
  return n;
}

bool PrefixCache::MakeRoom(int pages) {
  KvCacheEvent removed;
  removed.type = KvCacheEvent::Type::kRemoved;
  std::vector<KvCacheEvent> tier_events;  // after the pool's removal
  while (!pool_->CanAllocate(pages)) {
    const Key* victim = nullptr;
    uint64_t oldest = ~0ull;
    for (const auto& [key, e] : entries_) {
      if (e.users == 0 && e.last_used < oldest) {
        oldest = e.last_used;
        victim = &key;
      }
    }
    if (victim == nullptr) break;
    const Key key = *victim;
    if (tier_ != nullptr) Spill(entries_.at(key), &tier_events);
    const PageRef page = entries_.at(key).page;
    entries_.erase(key);
    key_of_page_.erase(page.page.value());
    pool_->Free({page});
    ++evicted_pages_;
    if (record_events_) removed.block_hashes.push_back(key);
  }
  if (!removed.block_hashes.empty()) events_.push_back(std::move(removed));
  for (KvCacheEvent& e : tier_events) events_.push_back(std::move(e));
  return pool_->CanAllocate(pages);
}

void PrefixCache::Spill(const Entry& e,
                        std::vector<KvCacheEvent>* tier_events) {
  std::shared_ptr<HostTier::Page> copy = HostTier::Capture(*pool_, e.page.page);
  copy->parent = e.tier_parent;
  copy->token_ids = e.tokens;
  std::vector<Key> evicted;
  const bool is_new = tier_->Put(e.tier_key, copy, &evicted);
  ++spilled_pages_;
  if (!record_events_) return;
  if (is_new) {
    KvCacheEvent stored;
    stored.type = KvCacheEvent::Type::kStored;
    stored.medium = KvCacheEvent::Medium::kCpu;
    stored.block_hashes = {e.tier_key};
    stored.parent = e.tier_parent;
    stored.cache_salt = e.tier_salt;
    stored.token_ids = e.tokens;
    tier_events->push_back(std::move(stored));
  }
  if (!evicted.empty()) {
    KvCacheEvent removed;
    removed.type = KvCacheEvent::Type::kRemoved;
    removed.medium = KvCacheEvent::Medium::kCpu;
    removed.block_hashes = std::move(evicted);
    tier_events->push_back(std::move(removed));
  }
}

}  // namespace kvcanary::engine
