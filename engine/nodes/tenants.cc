#include "engine/nodes/tenants.h"

#include <openssl/crypto.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace kvcanary::engine {
namespace {

// The router's reading of the file: a field it does not know is a typo.
constexpr TenantsFileOptions kStrict{/*reject_unknown_fields=*/true};

// SHA-256 of `key` as raw bytes.
std::string KeyDigest(absl::string_view key) {
  const std::array<uint8_t, 32> digest = Sha256(key);
  return std::string(reinterpret_cast<const char*>(digest.data()),
                     digest.size());
}

}  // namespace

absl::StatusOr<TenantRegistry> TenantRegistry::LoadFile(
    const std::string& path) {
  absl::StatusOr<std::vector<TenantsFileEntry>> entries =
      ReadTenantsFile(path, kStrict);
  if (entries.ok()) return FromEntries(*std::move(entries));
  if (entries.status().code() == absl::StatusCode::kInvalidArgument) {
    return entries.status();
  }
  return absl::NotFoundError(absl::StrCat("cannot read the tenants file: ",
                                          entries.status().message()));
}

absl::StatusOr<TenantRegistry> TenantRegistry::Parse(
    absl::string_view text, absl::string_view source_name) {
  ASSIGN_OR_RETURN(std::vector<TenantsFileEntry> entries,
                   ParseTenantsFile(text, source_name, kStrict));
  return FromEntries(std::move(entries));
}

TenantRegistry TenantRegistry::FromEntries(
    std::vector<TenantsFileEntry> entries) {
  TenantRegistry registry;
  for (size_t i = 0; i < entries.size(); ++i) {
    TenantsFileEntry& entry = entries[i];
    Tenant tenant;
    tenant.id = TenantId(static_cast<uint32_t>(i + 1));
    tenant.name = entry.id;
    tenant.max_concurrent_requests = entry.max_concurrent_requests.value_or(0);
    tenant.gateway = entry.gateway;
    for (std::string& key : entry.api_keys) {
      registry.key_digest_to_index_.emplace(KeyDigest(key), i);
      OPENSSL_cleanse(key.data(), key.size());
    }
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
  if (!IsValidApiKey(key)) {
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

absl::StatusOr<const Tenant*> TenantRegistry::ForGateway(
    const Tenant& gateway, absl::string_view header,
    const std::vector<absl::string_view>& values) const {
  CHECK(gateway.gateway);
  if (values.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a request with gateway '", gateway.name,
                     "''s key must name its ", "tenant in exactly one '",
                     header, "' header (it has ", values.size(), ")"));
  }
  const Tenant* tenant = FindByName(absl::StripAsciiWhitespace(values[0]));
  // The value is not echoed: it is the gateway's input, and a tenant name
  // is all it could be.
  if (tenant == nullptr || tenant->gateway) {
    return absl::PermissionDeniedError(
        absl::StrCat("the '", header, "' header names no tenant gateway '",
                     gateway.name, "' may act for"));
  }
  return tenant;
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
