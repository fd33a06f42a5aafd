#include "engine/nodes/tenants.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {
namespace {

using json = nlohmann::json;

constexpr size_t kSha256Bytes = 32;

// SHA-256 of `key` as raw bytes.
std::string KeyDigest(absl::string_view key) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_len = 0;
  // EVP_Digest fails only on allocation failure or a broken OpenSSL build.
  CHECK(EVP_Digest(key.data(), key.size(), digest, &digest_len, EVP_sha256(),
                   nullptr) == 1);
  CHECK_EQ(digest_len, kSha256Bytes);
  return std::string(reinterpret_cast<const char*>(digest), digest_len);
}

// Keys must survive an HTTP header and "Bearer <key>" splitting intact.
bool IsValidKey(absl::string_view key) {
  if (key.empty()) return false;
  for (unsigned char c : key) {
    if (c <= 0x20 || c == 0x7f) return false;
  }
  return true;
}

// Builds errors of the form "<source>: <json path>: <what>".
class Validator {
 public:
  explicit Validator(absl::string_view source) : source_(source) {}

  absl::Status Error(absl::string_view path, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": ", path, ": ", what));
  }

  // OK if every key of `object` is in `allowed`.
  absl::Status OnlyKnownFields(
      const json& object, absl::string_view path,
      std::initializer_list<absl::string_view> allowed) const {
    for (const auto& item : object.items()) {
      bool known = false;
      for (absl::string_view name : allowed) known |= item.key() == name;
      if (!known) {
        return Error(path, absl::StrCat("unknown field \"", item.key(), "\""));
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::string_view source_;
};

// Overwrites every key string held by the parsed document, so that key text
// does not linger in freed heap memory after loading (best effort: the
// caller's buffer and the parser's temporaries are out of reach).
void ScrubKeys(json& doc) {
  if (!doc.is_object() || !doc.contains("tenants")) return;
  json& tenants = doc["tenants"];
  if (!tenants.is_array()) return;
  for (json& tenant : tenants) {
    if (!tenant.is_object() || !tenant.contains("api_keys")) continue;
    json& keys = tenant["api_keys"];
    if (!keys.is_array()) continue;
    for (json& key : keys) {
      if (!key.is_string()) continue;
      std::string& text = key.get_ref<std::string&>();
      OPENSSL_cleanse(text.data(), text.size());
    }
  }
}

// "max_concurrent_requests": an integer in [0, 2^31-1] (0 = unlimited).
absl::StatusOr<int> ParseConcurrencyLimit(const Validator& v, const json& limit,
                                          const std::string& path) {
  if (!limit.is_number_integer() ||
      (limit.is_number_unsigned() && limit.get<uint64_t>() > INT_MAX) ||
      (!limit.is_number_unsigned() &&
       (limit.get<int64_t>() < 0 || limit.get<int64_t>() > INT_MAX))) {
    return v.Error(path + ".max_concurrent_requests",
                   "must be an integer in [0, 2^31-1] (0 = unlimited)");
  }
  return limit.get<int>();
}

// Tenant `index`'s API keys, by digest, into *digest_to_index; *key_paths
// (digest -> JSON path) names both places of a duplicate.
absl::Status ParseKeys(
    const Validator& v, const json& keys, const std::string& path, size_t index,
    absl::flat_hash_map<std::string, std::string>* key_paths,
    absl::flat_hash_map<std::string, size_t>* digest_to_index) {
  for (size_t k = 0; k < keys.size(); ++k) {
    const std::string key_path = absl::StrCat(path, ".api_keys[", k, "]");
    if (!keys[k].is_string()) return v.Error(key_path, "must be a string");
    const std::string& key = keys[k].get_ref<const std::string&>();
    if (!IsValidKey(key)) {
      return v.Error(key_path,
                     "API key must be non-empty, without whitespace or "
                     "control characters");
    }
    std::string digest = KeyDigest(key);
    auto [it, inserted] = key_paths->emplace(digest, key_path);
    if (!inserted) {
      return v.Error(key_path, absl::StrCat("duplicate API key (also at ",
                                            it->second, ")"));
    }
    digest_to_index->emplace(std::move(digest), index);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TenantRegistry> TenantRegistry::LoadFile(
    const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        path, ": cannot open the tenants file: ", std::strerror(errno)));
  }
  std::string text;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) {
    text.append(buffer, n);
  }
  OPENSSL_cleanse(buffer, sizeof(buffer));
  const bool read_failed = std::ferror(file) != 0;
  std::fclose(file);
  if (read_failed) {
    OPENSSL_cleanse(text.data(), text.size());
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot read the tenants file"));
  }
  absl::StatusOr<TenantRegistry> registry = Parse(text, path);
  OPENSSL_cleanse(text.data(), text.size());
  return registry;
}

absl::StatusOr<TenantRegistry> TenantRegistry::Parse(
    absl::string_view text, absl::string_view source_name) {
  const Validator v(source_name);
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    // e.what() quotes the text it last read, which may be a key: report
    // only the position.
    return v.Error("$", absl::StrCat("not valid JSON (syntax error at byte ",
                                     e.byte, ")"));
  }
  struct ScrubOnExit {
    json& doc;
    ~ScrubOnExit() { ScrubKeys(doc); }
  } scrub{doc};

  if (!doc.is_object()) return v.Error("$", "must be a JSON object");
  RETURN_IF_ERROR(v.OnlyKnownFields(doc, "$", {"tenants"}));
  if (!doc.contains("tenants")) {
    return v.Error("$", "missing required field \"tenants\"");
  }
  const json& list = doc["tenants"];
  if (!list.is_array()) return v.Error("$.tenants", "must be an array");
  if (list.empty()) {
    return v.Error("$.tenants", "must list at least one tenant");
  }

  TenantRegistry registry;
  // Digest -> JSON path of the key, to name both places of a duplicate.
  absl::flat_hash_map<std::string, std::string> key_paths;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& entry = list[i];
    const std::string path = absl::StrCat("$.tenants[", i, "]");
    if (!entry.is_object()) return v.Error(path, "must be an object");
    RETURN_IF_ERROR(v.OnlyKnownFields(
        entry, path, {"id", "api_keys", "max_concurrent_requests"}));

    Tenant tenant;
    tenant.id = TenantId(static_cast<uint32_t>(i + 1));
    if (!entry.contains("id")) {
      return v.Error(path, "missing required field \"id\"");
    }
    const json& id = entry["id"];
    if (!id.is_string() || id.get_ref<const std::string&>().empty()) {
      return v.Error(path + ".id", "must be a non-empty string");
    }
    tenant.name = id.get<std::string>();
    if (registry.name_to_index_.contains(tenant.name)) {
      return v.Error(path + ".id",
                     absl::StrCat("duplicate tenant id \"", tenant.name, "\""));
    }

    if (entry.contains("max_concurrent_requests")) {
      ASSIGN_OR_RETURN(
          tenant.max_concurrent_requests,
          ParseConcurrencyLimit(v, entry["max_concurrent_requests"], path));
    }

    if (!entry.contains("api_keys")) {
      return v.Error(path, "missing required field \"api_keys\"");
    }
    const json& keys = entry["api_keys"];
    if (!keys.is_array() || keys.empty()) {
      return v.Error(path + ".api_keys", "must be a non-empty array");
    }
    RETURN_IF_ERROR(ParseKeys(v, keys, path, i, &key_paths,
                              &registry.key_digest_to_index_));
    registry.name_to_index_.emplace(tenant.name, i);
    registry.tenants_.push_back(std::move(tenant));
  }
  return registry;
}

absl::StatusOr<const Tenant*> TenantRegistry::Authenticate(
    absl::string_view header) const {
  header = absl::StripAsciiWhitespace(header);
  if (header.empty()) {
    return absl::UnauthenticatedError(
        "missing API key: send \"Authorization: Bearer <key>\"");
  }
  constexpr absl::string_view kScheme = "Bearer ";
  // "Bearer" and nothing after it (the header was stripped): the scheme is
  // right, the key is missing.
  if (absl::EqualsIgnoreCase(header,
                             absl::StripTrailingAsciiWhitespace(kScheme))) {
    return absl::UnauthenticatedError(
        "missing API key after \"Bearer\": send \"Authorization: Bearer "
        "<key>\"");
  }
  if (!absl::StartsWithIgnoreCase(header, kScheme)) {
    return absl::UnauthenticatedError(
        "the Authorization header must use the Bearer scheme");
  }
  const absl::string_view key =
      absl::StripLeadingAsciiWhitespace(header.substr(kScheme.size()));
  if (!IsValidKey(key)) {
    return absl::UnauthenticatedError(
        "malformed Authorization header: expected \"Bearer <key>\"");
  }
  // A map lookup on the digest: its timing reveals nothing useful about the
  // key, since finding a key from its digest is preimage-hard.
  const auto it = key_digest_to_index_.find(KeyDigest(key));
  if (it == key_digest_to_index_.end()) {
    return absl::UnauthenticatedError("invalid API key");
  }
  return &tenants_[it->second];
}

const Tenant* TenantRegistry::Find(TenantId id) const {
  if (id == kNoTenant || id.value() > tenants_.size()) return nullptr;
  return &tenants_[id.value() - 1];
}

const Tenant* TenantRegistry::FindByName(absl::string_view name) const {
  const auto it = name_to_index_.find(name);
  return it == name_to_index_.end() ? nullptr : &tenants_[it->second];
}

}  // namespace kvcanary::engine
