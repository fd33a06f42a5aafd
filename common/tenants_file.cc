#include "common/tenants_file.h"

#include <openssl/crypto.h>

#include <climits>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace kvcanary {
namespace {

using json = nlohmann::json;

// Overwrites keys' text before their memory is freed.
void WipeKeys(std::vector<std::string>* keys) {
  for (std::string& key : *keys) OPENSSL_cleanse(key.data(), key.size());
}

// Parses one document; errors are "<source>: <path>: <what>".
class Parser {
 public:
  Parser(absl::string_view source, const TenantsFileOptions& options)
      : source_(source), options_(options) {}
  Parser(const Parser&) = delete;
  Parser& operator=(const Parser&) = delete;
  // Wipes the keys it holds (the map is only destroyed after this).
  ~Parser() {
    for (auto& [key, where] : key_paths_) {
      OPENSSL_cleanse(const_cast<char*>(key.data()), key.size());
    }
  }

  absl::StatusOr<std::vector<TenantsFileEntry>> Parse(const json& doc);

 private:
  absl::Status Error(absl::string_view path, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": ", path, ": ", what));
  }
  absl::Status KnownFields(const json& object, absl::string_view path,
                           std::initializer_list<absl::string_view> known);
  absl::StatusOr<TenantsFileEntry> Tenant(const json& entry, size_t index);
  absl::Status Keys(const json& entry, TenantsFileEntry* tenant);
  absl::Status Key(const json& key, const std::string& path,
                   TenantsFileEntry* tenant);
  absl::StatusOr<int> ConcurrencyLimit(const json& limit,
                                       const std::string& path) const;
  absl::StatusOr<std::string> CacheSalt(const json& salt,
                                        const std::string& path) const;

  absl::string_view source_;
  const TenantsFileOptions& options_;
  // Each id and key seen -> its JSON path (and a key's tenant), to name
  // both places of a duplicate. Keys are held only while parsing.
  absl::flat_hash_map<std::string, std::string> id_paths_;
  absl::flat_hash_map<std::string, std::pair<std::string, std::string>>
      key_paths_;
};

absl::Status Parser::KnownFields(
    const json& object, absl::string_view path,
    std::initializer_list<absl::string_view> known) {
  if (!options_.reject_unknown_fields) return absl::OkStatus();
  for (const auto& item : object.items()) {
    bool found = false;
    for (absl::string_view name : known) found |= item.key() == name;
    if (!found) {
      return Error(path, absl::StrCat("unknown field \"", item.key(), "\""));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TenantsFileEntry>> Parser::Parse(const json& doc) {
  if (!doc.is_object()) return Error("$", "must be a JSON object");
  RETURN_IF_ERROR(KnownFields(doc, "$", {"tenants"}));
  if (!doc.contains("tenants")) {
    return Error("$", "missing required field \"tenants\"");
  }
  const json& list = doc["tenants"];
  if (!list.is_array()) return Error("$.tenants", "must be an array");
  if (list.empty()) return Error("$.tenants", "must list at least one tenant");
  std::vector<TenantsFileEntry> out;
  for (size_t i = 0; i < list.size(); ++i) {
    absl::StatusOr<TenantsFileEntry> tenant = Tenant(list[i], i);
    if (!tenant.ok()) {
      for (TenantsFileEntry& done : out) WipeKeys(&done.api_keys);
      return tenant.status();
    }
    out.push_back(*std::move(tenant));
  }
  return out;
}

absl::StatusOr<TenantsFileEntry> Parser::Tenant(const json& entry,
                                                size_t index) {
  TenantsFileEntry tenant;
  tenant.json_path = absl::StrCat("$.tenants[", index, "]");
  const std::string& path = tenant.json_path;
  if (!entry.is_object()) return Error(path, "must be an object");
  RETURN_IF_ERROR(
      KnownFields(entry, path,
                  {"id", "api_key", "api_keys", "max_concurrent_requests",
                   "cache_salt", "gateway"}));
  if (!entry.contains("id")) {
    return Error(path, "missing required field \"id\"");
  }
  const json& id = entry["id"];
  if (!id.is_string() || id.get_ref<const std::string&>().empty()) {
    return Error(path + ".id", "must be a non-empty string");
  }
  tenant.id = id.get<std::string>();
  // Two entries of one name would share markers, limits and metrics.
  const auto [seen, inserted] = id_paths_.emplace(tenant.id, path);
  if (!inserted) {
    return Error(path + ".id", absl::StrCat("duplicate tenant id: '", tenant.id,
                                            "' is listed twice (also at ",
                                            seen->second, ")"));
  }
  if (entry.contains("max_concurrent_requests")) {
    ASSIGN_OR_RETURN(tenant.max_concurrent_requests,
                     ConcurrencyLimit(entry["max_concurrent_requests"], path));
  }
  if (entry.contains("cache_salt")) {
    ASSIGN_OR_RETURN(tenant.cache_salt, CacheSalt(entry["cache_salt"], path));
  }
  if (entry.contains("gateway")) {
    if (!entry["gateway"].is_boolean()) {
      return Error(path + ".gateway", "must be true or false");
    }
    tenant.gateway = entry["gateway"].get<bool>();
  }
  if (absl::Status keys = Keys(entry, &tenant); !keys.ok()) {
    WipeKeys(&tenant.api_keys);
    return keys;
  }
  return tenant;
}

absl::Status Parser::Keys(const json& entry, TenantsFileEntry* tenant) {
  const std::string& path = tenant->json_path;
  if (!entry.contains("api_key") && !entry.contains("api_keys")) {
    return Error(path, absl::StrCat("missing required field \"api_keys\" (or "
                                    "\"api_key\"): tenant '",
                                    tenant->id, "' has no key"));
  }
  if (entry.contains("api_key")) {
    RETURN_IF_ERROR(Key(entry["api_key"], path + ".api_key", tenant));
  }
  if (entry.contains("api_keys")) {
    const json& keys = entry["api_keys"];
    if (!keys.is_array() || keys.empty()) {
      return Error(path + ".api_keys", "must be a non-empty array");
    }
    for (size_t k = 0; k < keys.size(); ++k) {
      RETURN_IF_ERROR(
          Key(keys[k], absl::StrCat(path, ".api_keys[", k, "]"), tenant));
    }
  }
  return absl::OkStatus();
}

absl::Status Parser::Key(const json& key, const std::string& path,
                         TenantsFileEntry* tenant) {
  if (!key.is_string()) return Error(path, "must be a string");
  const std::string& text = key.get_ref<const std::string&>();
  if (!IsValidApiKey(text)) {
    return Error(path,
                 "API key must be non-empty, without whitespace or control "
                 "characters");
  }
  // One key of two tenants would make them one: a leak between them
  // could never show, and the router could not tell them apart.
  const auto [seen, inserted] =
      key_paths_.emplace(text, std::make_pair(path, tenant->id));
  if (!inserted) {
    const auto& [other_path, other_id] = seen->second;
    std::string what =
        absl::StrCat("duplicate API key (also at ", other_path, ")");
    if (other_id != tenant->id) {
      absl::StrAppend(&what, ": tenants '", other_id, "' and '", tenant->id,
                      "' have the same api_key");
    }
    return Error(path, what);
  }
  tenant->api_keys.push_back(text);
  return absl::OkStatus();
}

absl::StatusOr<int> Parser::ConcurrencyLimit(const json& limit,
                                             const std::string& path) const {
  if (!limit.is_number_integer() ||
      (limit.is_number_unsigned() && limit.get<uint64_t>() > INT_MAX) ||
      (!limit.is_number_unsigned() &&
       (limit.get<int64_t>() < 0 || limit.get<int64_t>() > INT_MAX))) {
    return Error(path + ".max_concurrent_requests",
                 "must be an integer in [0, 2^31-1] (0 = unlimited)");
  }
  return limit.get<int>();
}

absl::StatusOr<std::string> Parser::CacheSalt(const json& salt,
                                              const std::string& path) const {
  if (!salt.is_string() ||
      !IsValidCacheSalt(salt.get_ref<const std::string&>())) {
    return Error(path + ".cache_salt",
                 "must be a string of 1 to 256 bytes without control "
                 "characters");
  }
  return salt.get<std::string>();
}

// Overwrites every key string held by the parsed document, so that key text
// does not linger in freed heap memory (best effort: the parser's
// temporaries are out of reach).
void ScrubKeys(json& doc) {
  if (!doc.is_object() || !doc.contains("tenants")) return;
  json& tenants = doc["tenants"];
  if (!tenants.is_array()) return;
  const auto scrub = [](json& key) {
    if (!key.is_string()) return;
    std::string& text = key.get_ref<std::string&>();
    OPENSSL_cleanse(text.data(), text.size());
  };
  for (json& tenant : tenants) {
    if (!tenant.is_object()) continue;
    if (tenant.contains("api_key")) scrub(tenant["api_key"]);
    if (!tenant.contains("api_keys") || !tenant["api_keys"].is_array()) {
      continue;
    }
    for (json& key : tenant["api_keys"]) scrub(key);
  }
}

}  // namespace

bool IsValidApiKey(absl::string_view key) {
  if (key.empty()) return false;
  for (unsigned char c : key) {
    if (c <= 0x20 || c == 0x7f) return false;
  }
  return true;
}

bool IsValidCacheSalt(absl::string_view salt) {
  if (salt.empty() || salt.size() > kMaxCacheSaltBytes) return false;
  for (size_t i = 0; i < salt.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(salt[i]);
    // C0 controls and DEL.
    if (c < 0x20 || c == 0x7f) return false;
    // C1 controls, U+0080..U+009F: 0xC2 0x80..0x9F in UTF-8.
    if (c == 0xc2 && i + 1 < salt.size()) {
      const unsigned char next = static_cast<unsigned char>(salt[i + 1]);
      if (next >= 0x80 && next <= 0x9f) return false;
    }
  }
  return true;
}

absl::StatusOr<std::vector<TenantsFileEntry>> ParseTenantsFile(
    absl::string_view text, absl::string_view source,
    const TenantsFileOptions& options) {
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    // e.what() quotes the text it last read, which may be a key: report
    // only the position.
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": $: not valid JSON (syntax error at byte ", e.byte, ")"));
  }
  absl::StatusOr<std::vector<TenantsFileEntry>> tenants =
      Parser(source, options).Parse(doc);
  ScrubKeys(doc);
  return tenants;
}

absl::StatusOr<std::vector<TenantsFileEntry>> ReadTenantsFile(
    const std::string& path, const TenantsFileOptions& options) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  absl::StatusOr<std::vector<TenantsFileEntry>> tenants =
      ParseTenantsFile(text, path, options);
  OPENSSL_cleanse(text.data(), text.size());
  return tenants;
}

}  // namespace kvcanary
