// The prefix cache: full KV pages of earlier prompts, found again by a key
// over their tokens, so a request whose prompt starts the same way skips
// their prefill and reads the cached pages instead.
//
// Keys are salted SHA-256 chains: key(page i) = SHA-256(salt || key(page
// i-1) || the page's token ids), the node secret drawn at random when the
// cache is made. The mode (--prefix-cache) picks the salt:
//   tenant (default): salt = SHA-256(node secret || tenant id). The tenant
//     comes from the authenticated API key on the server side, never from
//     the client, so only requests of the same tenant share pages (vLLM's
//     cache_salt, done where a client cannot forge it).
//   global: salt = SHA-256(node secret || 0), the same for every tenant: one
//     tenant's cached prefix serves another's identical prompt (vLLM's and
//     SGLang's default, the common misconfiguration). The pages keep their
//     writer's stamp, so such a hit is a foreign_tenant_read: flagged in
//     detect mode, refused in enforce.
//   off: no cache (the engine makes none).
//
// A request's body may carry a cache_salt (vLLM's and SGLang's field);
// --cache-salt says what it does to the chain's start:
//   ignore (default): nothing; the mode's salt alone.
//   scoped: salt = SHA-256(node secret || the mode's tenant || 1 ||
//     cache_salt): a tenant partitions its own cache and never reaches
//     another tenant's, whatever salt it sends (in global mode every
//     tenant's salts share one space, as the mode says).
//   client: salt = SHA-256(node secret || 0xffffffff || cache_salt): the
//     body's salt replaces the tenant, as vLLM and SGLang do; whoever sends
//     another tenant's salt reads that tenant's pages (salt_forgeable).
//     Pages keep their writer's stamp, so such a read is flagged.
// A request without a salt is keyed as under ignore.
//
// The prefix-hash-collision fault weakens the key to a 32-bit FNV-1a over the
// tokens with a constant seed and no salt (vLLM GHSA-rm76-4mrf-v9r8): any
// tenant with the same prefix, or with a colliding one, gets the pages.
//
// With events on (EnableEvents), every change is also recorded as a
// KvCacheEvent (kv_cache_event.h) for the engine to hand on once per step:
// a run of pages one request published is one kStored event, the pages one
// MakeRoom() evicted one kRemoved event; hits record nothing (vLLM's
// default). The fault's 32-bit keys are recorded as they are stored: the
// hash's 4 bytes (little-endian) then 28 zero bytes.
//
// A page in the cache belongs to the cache: published from the request that
// computed it, which its stamp keeps naming as the writer, and flagged
// shared (kStampShared), so every request of that tenant may read it in
// this allocation and no other tenant may; a violation on it names the
// request whose prompt it holds. Pages in use by requests are never
// evicted; unused ones go least recently used first when the pool runs
// short.
//
// With a host tier (EnableHostTier, host_tier.h), MakeRoom() spills the
// pages it evicts into it, and Acquire() promotes a page the pool lacks
// but the tier holds instead of ending the run of hits: a pool page is
// allocated to the request, the copy's K/V restored under its writer's
// stamp at the new generation (page_alloc, page_write, page_share in the
// trace), and the page enters the cache under the request's key. Events:
// a spill is a kStored with medium kCpu (the tier's key, parent and token
// ids), a tier eviction a kRemoved kCpu, a promotion a kStored kGpu. The
// tier-drops-salt fault keys the tier by an unsalted SHA-256 chain over the
// tokens: another tenant's identical prefix promotes the first tenant's
// page, still stamped with its writer (a foreign_tenant_read when read).
//
// Not thread-safe; owned by the engine thread.
#ifndef KVCANARY_ENGINE_CORE_PREFIX_CACHE_H_
#define KVCANARY_ENGINE_CORE_PREFIX_CACHE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/ids.h"
#include "engine/core/host_tier.h"
#include "engine/core/kv_cache_event.h"
#include "engine/core/page_pool.h"
#include "engine/core/trace_bus.h"

namespace kvcanary::engine {

// Who shares cached prefix pages (--prefix-cache).
enum class PrefixCacheMode {
  kOff,     // no prefix cache
  kTenant,  // keys salted by tenant: pages shared within a tenant only
  kGlobal,  // keys not salted by tenant: pages shared by every tenant
};
// "off", "tenant" or "global".
const char* PrefixCacheModeName(PrefixCacheMode mode);
// "tenant", "global" or "off"; "true" and "false" (the flag was a boolean)
// mean tenant and off. kInvalidArgument otherwise.
absl::StatusOr<PrefixCacheMode> ParsePrefixCacheMode(absl::string_view name);

// What a request's cache_salt does (--cache-salt).
enum class CacheSaltMode {
  kIgnore,  // nothing
  kScoped,  // partitions the tenant's own keys
  kClient,  // replaces the tenant in the keys (the engines' behaviour)
};
// "ignore", "scoped" or "client".
const char* CacheSaltModeName(CacheSaltMode mode);
absl::StatusOr<CacheSaltMode> ParseCacheSaltMode(absl::string_view name);

class PrefixCache {
 public:
  using Key = BlockHash;

  // `weak_keys`: the prefix-hash-collision fault. REQUIRES: mode is not kOff.
  PrefixCache(PagePool* pool, PrefixCacheMode mode, bool weak_keys,
              TraceBus* trace,
              CacheSaltMode salt_mode = CacheSaltMode::kIgnore);

  // The key chain of the first `num_pages` full pages of `tokens`, as
  // `tenant` sends them with `cache_salt` ("" none; in global mode, the
  // same for every tenant).
  std::vector<Key> Keys(TenantId tenant, absl::string_view cache_salt,
                        const std::vector<int>& tokens, int num_pages) const;
  std::vector<Key> Keys(TenantId tenant, const std::vector<int>& tokens,
                        int num_pages) const {
    return Keys(tenant, "", tokens, num_pages);
  }
  // The salt a request's keys (and its stored events) carry: `cache_salt`
  // unless the mode ignores it.
  std::optional<std::string> AppliedSalt(absl::string_view cache_salt) const;
  CacheSaltMode salt_mode() const { return salt_mode_; }
  // The 32-bit key the fault uses, for tests that craft collisions: the
  // chain value after `tokens` starting from `parent` (0 for page 0).
  static uint32_t WeakHash(uint32_t parent, const int* tokens, int n);

  // Spills evicted pages into a host tier of `capacity_pages` from now on.
  // `drops_salt`: the tier-drops-salt fault (tier keys over the tokens
  // alone). REQUIRES: capacity_pages > 0; called once, before any publish.
  void EnableHostTier(int capacity_pages, bool drops_salt);
  const HostTier* host_tier() const { return tier_.get(); }
  // The host tier's keys of the first `num_pages` full pages of `tokens`:
  // Keys() unless the tier drops the salt.
  std::vector<Key> TierKeys(TenantId tenant, absl::string_view cache_salt,
                            const std::vector<int>& tokens,
                            int num_pages) const;

  // The longest run of cached pages matching keys[0..], each now in use
  // once more by `request`. Release with Unref.
  std::vector<PageRef> Acquire(const std::vector<Key>& keys);
  // With a host tier: extends `pages` (Acquire's run for `keys`) with pages
  // promoted from the tier for `request` of `tenant` (who owns them;
  // `tokens` is the prompt, keys its Keys() with `cache_salt`), and with
  // later pages the pool still holds; the run ends at a key neither holds,
  // a copy whose stamps fail HostTier::Check, or when no pool page can be
  // had. The scheduler calls it once the request's pages are known to fit,
  // so a request that waits copies nothing. Each promoted page takes one
  // free pool page. Returns how many pages it added (0 without a tier).
  int PromoteFromTier(const std::vector<Key>& keys, TenantId tenant,
                      RequestId request, const std::vector<int>& tokens,
                      absl::string_view cache_salt,
                      std::vector<PageRef>* pages);
  // Hands the pages a request of `tenant` computed to the cache, from page
  // `first` on, while their keys are new: pages[i] under keys[i], flagging
  // each stamp as the tenant's shared prefix (page_share in the trace); the
  // request keeps using them (Unref when done). Returns how many were
  // published; with events on, they are one kStored event whose parent is
  // keys[first - 1] and whose token ids are the pages' in `tokens`.
  // REQUIRES: keys.size() <= pages.size(); `tokens` covers keys.size()
  // pages; unless `as_computed`, `tenant` wrote every page published.
  // `as_computed` (abort-cache-insert): the pages may hold anything (never
  // written, another request's or tenant's bytes); their stamps are left
  // naming whoever wrote them, and only pages `tenant` wrote are flagged
  // shared.
  // `cache_salt`: the request's, recorded on the event of a run from page 0.
  int PublishRun(const std::vector<Key>& keys, int first,
                 const std::vector<PageRef>& pages,
                 const std::vector<int>& tokens, TenantId tenant,
                 bool as_computed = false, absl::string_view cache_salt = "");
  // A request stopped using a cached page.
  void Unref(PageRef page);
  // Frees unused cached pages, least recently used first, until the pool
  // has `pages` free or nothing unused is left. Returns whether it has.
  bool MakeRoom(int pages);

  // Records events from now on (the engine does, when it has a sink).
  void EnableEvents() { record_events_ = true; }
  // The events recorded since the last call, oldest first.
  std::vector<KvCacheEvent> TakeEvents();

  int size() const { return static_cast<int>(entries_.size()); }
  int num_unused() const;
  uint64_t hit_pages() const { return hit_pages_; }
  uint64_t published_pages() const { return published_pages_; }
  uint64_t evicted_pages() const { return evicted_pages_; }
  // Host tier counters (0 without one): pages spilled into it, pages found
  // in it by Acquire, of those promoted into the pool, and refused by
  // HostTier::Check.
  uint64_t spilled_pages() const { return spilled_pages_; }
  uint64_t tier_hit_pages() const { return tier_hit_pages_; }
  uint64_t promoted_pages() const { return promoted_pages_; }
  uint64_t tier_refused_pages() const { return tier_refused_pages_; }

 private:
  struct Entry {
    PageRef page;
    TenantId tenant;
    int users = 0;
    uint64_t last_used = 0;
    // With a host tier: the page's tier key, the tier key before it (none
    // for a prompt's first page) and its token ids, (page_tokens).
    Key tier_key{};
    std::optional<Key> tier_parent;
    // A prompt's first page: the cache_salt its tier key was salted with
    // (none under tier-drops-salt), for the spill's event.
    std::optional<std::string> tier_salt;
    std::vector<int> tokens;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  // The chain's start (see the top of this file).
  Key Salt(TenantId tenant, absl::string_view cache_salt) const;
  // Caches one page under `key`; false (nothing changes) if it is cached.
  bool Insert(const Key& key, PageRef page, TenantId tenant, bool as_computed);
  // Flags a page `tenant` published as its shared prefix; returns its
  // stamp's writer. `as_computed`: a page `tenant` did not write is left
  // unflagged instead of being a CHECK failure.
  RequestId MarkShared(PageRef page, TenantId tenant, bool as_computed);
  // Records the tier key and tokens of keys[i], just inserted.
  void NoteTierKey(const Key& key, const std::vector<Key>& tier_keys, int i,
                   const std::vector<int>& tokens,
                   absl::string_view cache_salt);
  // The salt a tier key of page 0 carries: the applied one, none under
  // tier-drops-salt.
  std::optional<std::string> TierSalt(absl::string_view cache_salt) const {
    return tier_drops_salt_ ? std::nullopt : AppliedSalt(cache_salt);
  }
  // Copies an evicted entry's page into the tier (before it is freed);
  // its events go to *tier_events.
  void Spill(const Entry& e, std::vector<KvCacheEvent>* tier_events);
  // Promotes the tier's copy under tier_keys[i] into the cache under
  // keys[i] for `request`; nullopt if the tier lacks it, its stamps fail
  // the check, or no pool page can be freed.
  std::optional<PageRef> Promote(const std::vector<Key>& keys,
                                 const std::vector<Key>& tier_keys, size_t i,
                                 TenantId tenant, RequestId request,
                                 absl::string_view cache_salt);
  // page_write, then page_share if shared: a promoted page's install.
  void TracePromotion(PageRef ref, const HostTier::Page& copy);

  PagePool* pool_;
  const PrefixCacheMode mode_;
  const CacheSaltMode salt_mode_;
  const bool weak_keys_;
  TraceBus* trace_;
  std::array<uint8_t, 32> secret_;
  absl::flat_hash_map<Key, Entry, KeyHash> entries_;
  absl::flat_hash_map<uint32_t, Key> key_of_page_;  // page id -> key
  bool record_events_ = false;
  std::vector<KvCacheEvent> events_;  // since the last TakeEvents()
  uint64_t tick_ = 0;
  uint64_t hit_pages_ = 0;
  uint64_t published_pages_ = 0;
  uint64_t evicted_pages_ = 0;
  std::unique_ptr<HostTier> tier_;  // null: no host tier
  bool tier_drops_salt_ = false;
  uint64_t spilled_pages_ = 0;
  uint64_t tier_hit_pages_ = 0;
  uint64_t promoted_pages_ = 0;
  uint64_t tier_refused_pages_ = 0;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_CORE_PREFIX_CACHE_H_
