// `cache-audit --salts` (docs/cache-audit.md, "Salts"): the cache-audit
// method applied to request salts instead of tenants. Each check is one
// writer/reader pair run through the same arms, looks and tests
// (decision.h); what changes is who writes, who reads, and which
// `cache_salt` each sends in its bodies:
//   salt_same    — A with A's salt, then again (the positive control);
//   salt_tenants — A with A's salt, then B with B's salt;
//   salt_salts   — A with A's salt, then A with a second salt of A's;
//   salt_forged  — A with A's salt, then B with A's salt (salt_forgeable);
//   salt_gateway — through the gateway's key: the header naming B with B's
//                  salt, then the header naming A with B's salt.
// Pure functions of the tenants and the measurements, so every pair and
// wording is testable without a target.
#ifndef KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_SALTS_H_
#define KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_SALTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "auditor/audits/cache_audit/report.h"
#include "auditor/result/coverage.h"
#include "auditor/result/result.h"
#include "auditor/target/tenants.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

struct SaltOptions {
  std::string tenant_header;   // e.g. "x-tenant-id"; empty: no gateway check
  std::string gateway_tenant;  // the tenants file's id of the gateway
};

// One check's writer and reader, as sent.
struct SaltPair {
  std::string check;   // salt_tenants, salt_salts, salt_forged, ...
  AuditTenant writer;  // body_salt and extra_header set
  AuditTenant reader;
  std::string writer_label, reader_label;  // e.g. "globex (acme's salt)"
  std::string finding_kind;  // cross_salt_cache_hit, salt_forgeable, ...
  Severity severity = Severity::kHigh;
  std::string meaning;  // what a hit means, for people
};

// The pairs for `tenants`: A and B are the first two tenants that are not
// the gateway; each sends its file's cache_salt, or (none given) one made
// up from its name, noted in `notes`. kInvalidArgument for fewer than two
// such tenants, a --tenant-header without --gateway-key or the reverse, or
// a gateway id that is not a tenant of the file marked "gateway": true.
absl::StatusOr<std::vector<SaltPair>> MakeSaltPairs(
    const std::vector<AuditTenant>& tenants, const SaltOptions& options,
    std::vector<std::string>* notes);

struct SaltPairOutcome {
  SaltPair pair;
  CacheAuditOutcome out;  // writer/reader: the pair's labels
};

// One detector row per check: salt_same (the first pair's same arm: can a
// hit be seen at all?), then each pair's timing coverage under its check's
// name.
std::vector<DetectorCoverage> SaltCoverage(
    const std::vector<SaltPairOutcome>& pairs);
// The `cache_audit` details of --salts: per check its level, labels and the
// pair's full cache-audit details.
nlohmann::json SaltDetails(const std::vector<SaltPairOutcome>& pairs);
// salt_same (passed when a same-salt repeat was seen to hit), then per
// pair: passed when isolated, failed on a hit, skipped otherwise.
std::vector<Check> SaltChecks(const std::vector<SaltPairOutcome>& pairs);
// CrossTenantFinding of the pair's signal, as the pair's finding kind and
// severity, with the check named; detector: the check (cached_tokens
// signals too, recorded in detail.signal).
Finding SaltFinding(const SaltPairOutcome& p, const std::string& signal,
                    const std::vector<int64_t>& probe_ids);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_SALTS_H_
