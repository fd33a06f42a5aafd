// Reading the JSON a server states about itself (GET /version, /props,
// /info, /get_server_info): one GET as JSON, and a positive integer at a
// path of keys. Shared by the readers of limits (limits.h) and cache tiers
// (cache_tiers.h); nothing here fails: a missing endpoint or field is
// simply not stated.
#ifndef KVCANARY_AUDITOR_TARGET_INFO_READS_H_
#define KVCANARY_AUDITOR_TARGET_INFO_READS_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "auditor/target/http_client.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// The positive integer (below 2^31) at `path` (keys) in `j`, or 0.
inline int IntAt(const nlohmann::json& j,
                 std::initializer_list<const char*> path) {
  const nlohmann::json* at = &j;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return 0;
    at = &(*at)[key];
  }
  if (at->is_number_integer() && at->get<int64_t>() > 0 &&
      at->get<int64_t>() < (1ll << 31)) {
    return at->get<int>();
  }
  return 0;
}

// GET `url` as JSON; null unless it answered 200 with a JSON body.
inline nlohmann::json GetJson(const HttpClient& http, const std::string& url,
                              const std::vector<std::string>& headers,
                              absl::Duration timeout) {
  absl::StatusOr<HttpResponse> r = http.Get(url, headers, timeout);
  if (!r.ok() || r->status != 200) return nlohmann::json();
  return nlohmann::json::parse(r->body, nullptr, false);
}

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TARGET_INFO_READS_H_
