// Tenants and their API keys, loaded from the tenants file (docs/api.md):
//
//   {"tenants": [{"id": "acme", "api_keys": ["sk-..."],
//                 "max_concurrent_requests": 16}]}
//
// The router authenticates each request's "Authorization: Bearer <key>"
// header against it (the "auth (API key -> tenant)" step of the request
// lifecycle). Only SHA-256 digests of the keys are kept after loading, so
// the registry never holds a key in plain text, and no error message ever
// contains key text.
#ifndef KVCANARY_ENGINE_NODES_TENANTS_H_
#define KVCANARY_ENGINE_NODES_TENANTS_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/ids.h"
#include "common/tenants_file.h"

namespace kvcanary::engine {

struct Tenant {
  TenantId id;       // 1..N in file order; never kNoTenant
  std::string name;  // "id" in the file; bounded, safe as a metric label
  int max_concurrent_requests = 0;  // 0 = unlimited
  // "gateway": true in the file: its keys are a gateway's, which names the
  // tenant of each request in the router's --tenant-header.
  bool gateway = false;
};

// Immutable after loading; thread-safe for concurrent use.
class TenantRegistry {
 public:
  // kNotFound naming the path if it cannot be read; otherwise as Parse()
  // with the path as source name.
  static absl::StatusOr<TenantRegistry> LoadFile(const std::string& path);
  // kInvalidArgument naming `source_name` and the JSON path of the problem
  // (common/tenants_file.h's rules): not JSON, missing or wrongly typed
  // fields, unknown fields (a typo in a limit must not silently drop it),
  // no tenants, an empty or duplicate tenant id, an empty key or one with
  // whitespace or control characters, a key listed twice (within or across
  // tenants).
  static absl::StatusOr<TenantRegistry> Parse(absl::string_view json,
                                              absl::string_view source_name);

  // The tenant whose key is presented in `authorization_header`, the raw
  // value of the HTTP Authorization header: "Bearer <key>" (scheme
  // case-insensitive, RFC 7235). kUnauthenticated if it is empty, uses
  // another scheme, is malformed or names no key; the message never
  // contains the key. The pointer is valid while the registry lives.
  absl::StatusOr<const Tenant*> Authenticate(
      absl::string_view authorization_header) const;

  // The tenant a gateway's request is for (docs/api.md, "Gateways"):
  // `values` are the request's fields named `header` (the router's
  // --tenant-header), in order. kInvalidArgument (400) unless there is
  // exactly one; kPermissionDenied (403) if it names no tenant of the file,
  // or a gateway. REQUIRES: gateway.gateway.
  absl::StatusOr<const Tenant*> ForGateway(
      const Tenant& gateway, absl::string_view header,
      const std::vector<absl::string_view>& values) const;

  // nullptr if absent.
  const Tenant* Find(TenantId id) const;
  const Tenant* FindByName(absl::string_view name) const;
  const std::vector<Tenant>& tenants() const { return tenants_; }

 private:
  TenantRegistry() = default;
  // Tenant i of `entries` becomes TenantId(i + 1); the keys' text is wiped.
  static TenantRegistry FromEntries(std::vector<TenantsFileEntry> entries);

  std::vector<Tenant> tenants_;  // tenants_[i].id == i + 1
  // SHA-256(key) as 32 raw bytes -> index into tenants_.
  absl::flat_hash_map<std::string, size_t> key_digest_to_index_;
  absl::flat_hash_map<std::string, size_t> name_to_index_;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_TENANTS_H_
