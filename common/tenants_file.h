// The tenants file (docs/api.md), one parser for every reader of it: the
// engine's router (who a key belongs to), the auditor (whom it acts as) and
// the soak (whom it sends as).
//
//   {"tenants": [
//     {"id": "acme", "api_keys": ["sk-acme-1", "sk-acme-2"],
//      "max_concurrent_requests": 16, "cache_salt": "acme-1"},
//     {"id": "globex", "api_key": "sk-globex-1"},
//     {"id": "edge", "api_key": "sk-edge", "gateway": true}]}
//
// "api_key" (one key) and "api_keys" (a list) may both be given; the keys
// are the one then the list. Rules every reader shares: at least one tenant;
// ids non-empty and unique; at least one key per tenant; keys non-empty,
// without whitespace or control characters (they travel as
// "Authorization: Bearer <key>"), unique across the whole file. Errors are
// kInvalidArgument "<source>: <JSON path>: <what>", name the tenant where
// there is one, and never contain key text.
#ifndef KVCANARY_COMMON_TENANTS_FILE_H_
#define KVCANARY_COMMON_TENANTS_FILE_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvcanary {

struct TenantsFileEntry {
  std::string id;                     // "id": the tenant's name
  std::vector<std::string> api_keys;  // "api_key", then "api_keys"; >= 1
  // "max_concurrent_requests": an integer in [0, 2^31-1], 0 = unlimited;
  // absent if the file does not set it.
  std::optional<int> max_concurrent_requests;
  // "cache_salt": the salt the auditor sends in this tenant's request
  // bodies (cache-audit --salts; docs/cache-audit.md); 1..256 bytes, no
  // control characters. Absent: none sent. The engine's router ignores it.
  std::optional<std::string> cache_salt;
  // "gateway": the tenant's keys belong to a gateway that names the tenant
  // of each request in a header (the router's --tenant-header;
  // docs/api.md, "Gateways"). Default false.
  bool gateway = false;
  std::string json_path;  // "$.tenants[2]", for a reader's own errors
};

struct TenantsFileOptions {
  // The router rejects a field it does not know (a typo in a limit must not
  // silently drop it); the auditor and the soak ignore one (a file may
  // carry another server's settings).
  bool reject_unknown_fields = false;
};

// Non-empty, no whitespace or control characters: a key that survives an
// HTTP header and "Bearer <key>" splitting intact.
bool IsValidApiKey(absl::string_view key);

// A cache salt (the request body's "cache_salt", a tenants file's
// "cache_salt"): 1..kMaxCacheSaltBytes bytes, no control characters (C0,
// DEL, and C1: U+0080..U+009F as UTF-8).
inline constexpr size_t kMaxCacheSaltBytes = 256;
bool IsValidCacheSalt(absl::string_view salt);

// The tenants of `text`, in file order; `source` (usually the path) starts
// every error message. The parsed document's copies of the keys are wiped
// before returning; the returned keys are the caller's to keep or wipe.
absl::StatusOr<std::vector<TenantsFileEntry>> ParseTenantsFile(
    absl::string_view text, absl::string_view source,
    const TenantsFileOptions& options);

// ParseTenantsFile of the file at `path`, with the path as source; the
// file's errors are ReadFile's (kNotFound, kPermissionDenied, ... naming
// the path). The bytes read are wiped after parsing.
absl::StatusOr<std::vector<TenantsFileEntry>> ReadTenantsFile(
    const std::string& path, const TenantsFileOptions& options);

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_TENANTS_FILE_H_
