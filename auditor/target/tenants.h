// The tenants an audit campaign acts as, each with its own API key.
#ifndef KVCANARY_AUDITOR_TARGET_TENANTS_H_
#define KVCANARY_AUDITOR_TARGET_TENANTS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kvcanary::auditor {

struct AuditTenant {
  AuditTenant() = default;
  AuditTenant(std::string name_in, std::string api_key_in)
      : name(std::move(name_in)), api_key(std::move(api_key_in)) {}

  std::string name;
  std::string api_key;
  // The tenants file's "cache_salt" (empty: none) and "gateway".
  std::string cache_salt;
  bool gateway = false;
  // Sent only where a command asks (cache-audit --salts): the body's
  // "cache_salt" (empty: none) and one more header, "Name: value" (empty:
  // none), e.g. a gateway's tenant header.
  std::string body_salt;
  std::string extra_header;
};
// A tenants file (common/tenants_file.h): {"tenants": [{"id": "acme",
// "api_key": "sk-..."}]}, or the engine's "api_keys": [...] (the first key
// is used), so one file serves both; fields the auditor does not know are
// ignored; "cache_salt" and "gateway" are kept. Errors name the file and the
// problem; at least two tenants are required (a leak needs a victim and a
// reader), and no two may share a name or a key.
absl::StatusOr<std::vector<AuditTenant>> LoadAuditTenants(
    const std::string& path);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TARGET_TENANTS_H_
