#include "auditor/target/tenants.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

using json = nlohmann::json;

absl::StatusOr<std::vector<AuditTenant>> LoadAuditTenants(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  const json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("tenants") ||
      !j["tenants"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": want {\"tenants\": [{\"id\": ..., \"api_key\": ...}]}"));
  }
  std::vector<AuditTenant> out;
  for (const json& t : j["tenants"]) {
    AuditTenant a;
    if (!t.is_object() || !t.contains("id") || !t["id"].is_string() ||
        t["id"].get<std::string>().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": every tenant needs a non-empty \"id\""));
    }
    a.name = t["id"].get<std::string>();
    if (t.contains("api_key") && t["api_key"].is_string()) {
      a.api_key = t["api_key"].get<std::string>();
    } else if (t.contains("api_keys") && t["api_keys"].is_array() &&
               !t["api_keys"].empty() && t["api_keys"][0].is_string()) {
      a.api_key = t["api_keys"][0].get<std::string>();
    }
    if (a.api_key.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tenant '", a.name, "' has no \"api_key\""));
    }
    // Two entries of one name would share markers and coverage, and two of
    // one key would be one tenant: a leak between them could never show.
    for (const AuditTenant& other : out) {
      if (other.name == a.name) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": tenant '", a.name, "' is listed twice"));
      }
      if (other.api_key == a.api_key) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": tenants '", other.name, "' and '", a.name,
                         "' have the same api_key"));
      }
    }
    out.push_back(std::move(a));
  }
  if (out.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": at least two tenants are needed (a leak has a victim and a "
        "reader)"));
  }
  return out;
}

}  // namespace kvcanary::auditor
