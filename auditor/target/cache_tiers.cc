// The KV cache tiers a target states (auditor/target/cache_tiers.h).
#include "auditor/target/cache_tiers.h"

#include "absl/strings/str_cat.h"
#include "auditor/target/info_reads.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

// kvcanary: the prefill nodes' page pool and host tier (docs/api.md,
// "GET /version").
bool KvcanaryTiers(const json& version, CacheTiers* out) {
  if (!version.is_object() || version.value("engine", "") != "kvcanary") {
    return false;
  }
  if (int tokens = IntAt(version, {"kv_cache_tokens"})) {
    out->first_tier_tokens = tokens;
    out->first_tier_where = "GET /version kv_cache_tokens";
  }
  if (int pages = IntAt(version, {"host_tier_pages"})) {
    out->second_tier = true;
    out->second_tier_where =
        absl::StrCat("GET /version host_tier_pages ", pages, " (host tier)");
  }
  return true;
}

// SGLang: server_args and the scheduler's info (docs/targets.md).
bool SglangTiers(const json& info, CacheTiers* out) {
  if (!info.is_object()) return false;
  bool stated = false;
  if (int tokens = IntAt(info, {"max_total_num_tokens"})) {
    out->first_tier_tokens = tokens;
    out->first_tier_where = "GET /get_server_info max_total_num_tokens";
    stated = true;
  }
  const json hicache = info.value("enable_hierarchical_cache", json());
  if (hicache.is_boolean() && hicache.get<bool>()) {
    out->second_tier = true;
    out->second_tier_where =
        "GET /get_server_info enable_hierarchical_cache (HiCache host tier)";
    stated = true;
  }
  const json storage = info.value("hicache_storage_backend", json());
  if (storage.is_string() && !storage.get<std::string>().empty()) {
    out->second_tier = true;
    if (out->second_tier_where.empty()) {
      out->second_tier_where =
          absl::StrCat("GET /get_server_info hicache_storage_backend ",
                       storage.get<std::string>());
    }
    stated = true;
  }
  return stated;
}

}  // namespace

int CacheTiers::DefaultEvictTokens() const {
  if (!second_tier || first_tier_tokens <= 0) return 0;
  return first_tier_tokens + (first_tier_tokens + 3) / 4;
}

std::string CacheTiers::Unchecked(int evict_tokens) const {
  if (!second_tier) return "";
  if (first_tier_tokens > 0 && evict_tokens >= first_tier_tokens) return "";
  const std::string size =
      first_tier_tokens > 0
          ? absl::StrCat("the first tier's ", first_tier_tokens, " tokens (",
                         first_tier_where, ")")
          : "the first tier's size, which the target does not state";
  return absl::StrCat(
      "the target reports a second KV cache tier (", second_tier_where,
      "), and --evict-tokens=", evict_tokens, " is below ", size,
      ": every probe was answered from the first tier, so the second was "
      "never checked");
}

json CacheTiers::ToJson() const {
  return {{"first_tier_tokens", first_tier_tokens},
          {"first_tier_where", first_tier_where},
          {"second_tier", second_tier},
          {"second_tier_where", second_tier_where}};
}

CacheTiers ReadCacheTiers(const HttpClient& http, const std::string& root,
                          const std::vector<std::string>& headers,
                          absl::Duration timeout) {
  CacheTiers out;
  if (KvcanaryTiers(GetJson(http, root + "/version", headers, timeout), &out)) {
    return out;
  }
  SglangTiers(GetJson(http, root + "/get_server_info", headers, timeout), &out);
  return out;
}

}  // namespace kvcanary::auditor
