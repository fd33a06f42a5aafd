// What a target states about its KV cache's tiers, read where the servers
// state it (docs/targets.md, "Cache tiers"): the first tier's size in
// tokens, and whether a second tier (host memory, a storage backend) sits
// behind it. A prompt is looked up in the first tier first, so a prime
// probed at once never reaches the second: cache-audit vouches for a
// reported second tier only when its fillers (--evict-tokens) push each
// prime out of the first, and is inconclusive, never clean, otherwise.
#ifndef KVCANARY_AUDITOR_TARGET_CACHE_TIERS_H_
#define KVCANARY_AUDITOR_TARGET_CACHE_TIERS_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "auditor/target/http_client.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

struct CacheTiers {
  int first_tier_tokens = 0;     // 0: not stated
  std::string first_tier_where;  // e.g. "GET /version kv_cache_tokens"
  bool second_tier = false;
  std::string second_tier_where;  // e.g. "GET /version host_tier_pages 256"

  // --evict-tokens when none is given: 1.25 x the first tier where a second
  // tier and the first tier's size are both stated (fillers of a quarter
  // more than the tier leave no prime in it), else 0.
  int DefaultEvictTokens() const;
  // Why fillers of `evict_tokens` leave the second tier unchecked (fewer
  // than the first tier holds, or none where its size is not stated); ""
  // where there is no second tier or they reach it.
  std::string Unchecked(int evict_tokens) const;
  // {"first_tier_tokens", "first_tier_where", "second_tier",
  // "second_tier_where"}: the result's record of what was read.
  nlohmann::json ToJson() const;
};

// Reads kvcanary's GET /version (host_tier_pages, kv_cache_tokens) and
// SGLang's GET /get_server_info (enable_hierarchical_cache,
// hicache_storage_backend, max_total_num_tokens) under `root`, sending
// `headers`; an endpoint that fails or lacks the fields states nothing.
CacheTiers ReadCacheTiers(const HttpClient& http, const std::string& root,
                          const std::vector<std::string>& headers,
                          absl::Duration timeout);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TARGET_CACHE_TIERS_H_
