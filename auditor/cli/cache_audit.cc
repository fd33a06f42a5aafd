// kvcanary-auditor cache-audit: whether the prompt cache lets one tenant's
// prompt speed up another's (docs/cache-audit.md).
#include "auditor/audits/cache_audit/cache_audit.h"

#include <string>

#include "absl/flags/flag.h"
#include "auditor/cli/commands.h"
#include "auditor/cli/shared_flags.h"
#include "auditor/reports/metrics.h"
#include "common/status_macros.h"

ABSL_FLAG(double, alpha, 1e-6,
          "cache-audit: significance of the two-sample Kolmogorov-Smirnov "
          "test.");
ABSL_FLAG(int, max_samples, 400,
          "cache-audit: first-token times per arm at most (at least 12 at the "
          "default alpha, at most 2000).");
ABSL_FLAG(int, prefix_tokens, 0,
          "cache-audit: tokens of the primed prefix (0: sized from the "
          "limit).");
ABSL_FLAG(int, evict_tokens, -1,
          "cache-audit: after each primed prefix, the writer sends cache-"
          "busted filler prompts of at least this many tokens in all, so the "
          "prefix leaves the first cache tier before the probe and a hit can "
          "only come from a second tier (host memory, LMCache, HiCache); at "
          "least the first tier's size in tokens. 0: none (a second tier the "
          "target reports is then unchecked: exit 3). -1 (default): 1.25 x "
          "the first tier where the target states a second tier and the "
          "first tier's size, else 0.");

ABSL_FLAG(bool, salts, false,
          "cache-audit: audit request cache salts (the tenants file's "
          "cache_salt) instead of tenants: same salt, different salts, a "
          "forged salt and (with --tenant-header) a gateway's tenant header "
          "against a body salt.");
ABSL_FLAG(std::string, tenant_header, "",
          "cache-audit --salts: the header a gateway names the tenant in "
          "(with --gateway-key).");
ABSL_FLAG(std::string, gateway_key, "",
          "cache-audit --salts: the id of the tenants file's gateway tenant "
          "(\"gateway\": true) whose key sends --tenant-header; the key is "
          "read from the file.");

namespace kvcanary::auditor::cli {
namespace {

absl::StatusOr<CacheAuditOptions> CacheAuditOptionsFromFlags() {
  CacheAuditOptions o;
  RETURN_IF_ERROR(CommandFromFlags(/*tenants_required=*/true, &o));
  o.alpha = absl::GetFlag(FLAGS_alpha);
  o.max_samples = absl::GetFlag(FLAGS_max_samples);
  o.prefix_tokens = absl::GetFlag(FLAGS_prefix_tokens);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.evict_tokens = absl::GetFlag(FLAGS_evict_tokens);
  ASSIGN_OR_RETURN(o.kv_events, KvEventsFromFlags());
  o.salts = absl::GetFlag(FLAGS_salts);
  o.salt.tenant_header = absl::GetFlag(FLAGS_tenant_header);
  o.salt.gateway_tenant = absl::GetFlag(FLAGS_gateway_key);
  if (!o.salts &&
      !(o.salt.tenant_header.empty() && o.salt.gateway_tenant.empty())) {
    return absl::InvalidArgumentError(
        "--tenant-header and --gateway-key are for --salts");
  }
  if (!(o.alpha > 0 && o.alpha < 1) || o.max_samples < 1 ||
      o.prefix_tokens < 0 || o.evict_tokens < -1) {
    return absl::InvalidArgumentError(
        "--alpha must be in (0, 1), --max-samples >= 1, --prefix-tokens >= 0 "
        "and --evict-tokens >= -1 (-1: from the target's tiers)");
  }
  return o;
}

int RunCacheAuditCommand(const CliParse&) {
  absl::StatusOr<CacheAuditOptions> o = CacheAuditOptionsFromFlags();
  if (!o.ok()) return Fail(o.status());
  AuditorMetrics metrics;
  return Conclude(RunCacheAudit(*o, &metrics), metrics);
}

const CommandRegistration kCacheAudit(
    AuditorCommands(),
    {50,
     {"cache-audit",
      "Whether the prompt cache lets one tenant's prompt speed up "
      "another's: first-token timing (KS test) and reported cached tokens.",
      WithReportFlags({"target", "tenants", "model", "api", "timeout", "alpha",
                       "max_samples", "prefix_tokens", "evict_tokens", "seed",
                       "kv_events", "salts", "tenant_header", "gateway_key",
                       "trace_token_file", "max_consecutive_failures"}),
      {}},
     RunCacheAuditCommand});

}  // namespace
}  // namespace kvcanary::auditor::cli
