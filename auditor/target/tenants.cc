#include "auditor/target/tenants.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tenants_file.h"

namespace kvcanary::auditor {

absl::StatusOr<std::vector<AuditTenant>> LoadAuditTenants(
    const std::string& path) {
  // Fields of other servers' tenants files are not the auditor's to judge.
  ASSIGN_OR_RETURN(std::vector<TenantsFileEntry> entries,
                   ReadTenantsFile(path, TenantsFileOptions{}));
  if (entries.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": at least two tenants are needed (a leak has a victim and a "
        "reader)"));
  }
  std::vector<AuditTenant> out;
  for (TenantsFileEntry& e : entries) {
    AuditTenant t;
    t.name = std::move(e.id);
    t.api_key = std::move(e.api_keys.front());
    t.cache_salt = e.cache_salt.value_or("");
    t.gateway = e.gateway;
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace kvcanary::auditor
