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

std::vector<PageRef> PrefixCache::Acquire(const std::vector<Key>& keys,
                                          TenantId tenant, RequestId request) {
  (void)tenant;
  (void)request;
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

int PrefixCache::PublishRun(const std::vector<Key>& keys, int first,
                            const std::vector<PageRef>& pages,
                            const std::vector<int>& tokens, TenantId tenant,
                            bool as_computed, absl::string_view cache_salt) {
  const int n = static_cast<int>(keys.size());
  const int pt = pool_->page_tokens();
  CHECK_LE(n, static_cast<int>(pages.size()));
  CHECK_LE(n * pt, static_cast<int>(tokens.size()));
  int end = first;
  while (end < n && Insert(keys[end], pages[end], tenant, as_computed)) ++end;
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
    const PageRef page = entries_.at(key).page;
    entries_.erase(key);
    key_of_page_.erase(page.page.value());
    pool_->Free({page});
    ++evicted_pages_;
    if (record_events_) removed.block_hashes.push_back(key);
  }
  if (!removed.block_hashes.empty()) events_.push_back(std::move(removed));
  return pool_->CanAllocate(pages);
}

}  // namespace kvcanary::engine
