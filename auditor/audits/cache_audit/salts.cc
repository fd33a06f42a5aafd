#include "auditor/audits/cache_audit/salts.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

// The salt `t` sends: its file's, or one made up from its name.
std::string SaltOf(const AuditTenant& t, std::vector<std::string>* notes) {
  if (!t.cache_salt.empty()) return t.cache_salt;
  notes->push_back(absl::StrCat("tenant '", t.name,
                                "' has no cache_salt in the tenants file: it "
                                "sends 'kvcanary-salt-",
                                t.name, "'"));
  return absl::StrCat("kvcanary-salt-", t.name);
}

AuditTenant Sending(const AuditTenant& t, const std::string& salt,
                    const std::string& header = "") {
  AuditTenant s = t;
  s.body_salt = salt;
  s.extra_header = header;
  return s;
}

SaltPair Pair(std::string check, AuditTenant writer, std::string writer_label,
              AuditTenant reader, std::string reader_label, std::string kind,
              Severity severity, std::string meaning) {
  SaltPair p;
  p.check = std::move(check);
  p.writer = std::move(writer);
  p.reader = std::move(reader);
  p.writer_label = std::move(writer_label);
  p.reader_label = std::move(reader_label);
  p.finding_kind = std::move(kind);
  p.severity = severity;
  p.meaning = std::move(meaning);
  return p;
}

// The gateway tenant --gateway-key names, or an error.
absl::StatusOr<const AuditTenant*> FindGateway(
    const std::vector<AuditTenant>& tenants, const SaltOptions& o) {
  for (const AuditTenant& t : tenants) {
    if (t.name == o.gateway_tenant && t.gateway) return &t;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--gateway-key=", o.gateway_tenant,
      " must name a tenant of the tenants file marked \"gateway\": true"));
}

// The gateway check's pair: both through the gateway's key.
SaltPair GatewayPair(const AuditTenant& gw, const std::string& header,
                     const AuditTenant& a, const AuditTenant& b,
                     const std::string& salt_b) {
  const std::string h = header + ": ";
  return Pair("salt_gateway", Sending(gw, salt_b, h + b.name),
              absl::StrCat(gw.name, " for ", b.name),
              Sending(gw, salt_b, h + a.name),
              absl::StrCat(gw.name, " for ", a.name, " (", b.name, "'s salt)"),
              "gateway_salt_override", Severity::kCritical,
              absl::StrCat("a request the gateway sent for ", a.name,
                           " read the cache of ", b.name,
                           " by carrying its salt: the body salt overrides "
                           "the tenant header"));
}

}  // namespace

absl::StatusOr<std::vector<SaltPair>> MakeSaltPairs(
    const std::vector<AuditTenant>& tenants, const SaltOptions& o,
    std::vector<std::string>* notes) {
  if (o.tenant_header.empty() != o.gateway_tenant.empty()) {
    return absl::InvalidArgumentError(
        "--tenant-header and --gateway-key go together");
  }
  const AuditTenant* gw = nullptr;
  if (!o.tenant_header.empty()) {
    ASSIGN_OR_RETURN(gw, FindGateway(tenants, o));
  }
  std::vector<const AuditTenant*> plain;
  for (const AuditTenant& t : tenants) {
    if (!t.gateway) plain.push_back(&t);
  }
  if (plain.size() < 2) {
    return absl::InvalidArgumentError(
        "cache-audit --salts needs two tenants that are not gateways");
  }
  const AuditTenant& a = *plain[0];
  const AuditTenant& b = *plain[1];
  const std::string sa = SaltOf(a, notes), sb = SaltOf(b, notes);
  if (sa == sb) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tenants '", a.name, "' and '", b.name, "' have the same cache_salt"));
  }
  std::vector<SaltPair> pairs;
  const std::string forged = absl::StrCat(b.name, " (", a.name, "'s salt)");
  pairs.push_back(Pair(
      "salt_tenants", Sending(a, sa), a.name, Sending(b, sb), b.name,
      "cross_salt_cache_hit", Severity::kHigh,
      absl::StrCat(b.name, " with its own salt read ", a.name, "'s prefix")));
  pairs.push_back(Pair("salt_salts", Sending(a, sa), a.name,
                       Sending(a, sa + "-2"),
                       absl::StrCat(a.name, " (second salt)"),
                       "cross_salt_cache_hit", Severity::kMedium,
                       absl::StrCat("a second salt of ", a.name,
                                    " read the first's prefix: the salt does "
                                    "not partition the cache")));
  pairs.push_back(
      Pair("salt_forged", Sending(a, sa), a.name, Sending(b, sa), forged,
           "salt_forgeable", Severity::kCritical,
           absl::StrCat(b.name, " sending ", a.name, "'s salt read ", a.name,
                        "'s prefix: whoever knows a salt reads "
                        "its cache")));
  if (gw != nullptr) {
    pairs.push_back(GatewayPair(*gw, o.tenant_header, a, b, sb));
  }
  return pairs;
}

std::vector<DetectorCoverage> SaltCoverage(
    const std::vector<SaltPairOutcome>& pairs) {
  std::vector<DetectorCoverage> rows;
  if (pairs.empty()) return rows;
  const CacheAuditOutcome& first = pairs.front().out;
  const LookTests& t = first.tests;
  DetectorCoverage same;
  same.name = "salt_same";
  same.unit = "same-salt repeats timed";
  same.floor = first.plan.reach;
  same.coverage[first.writer] =
      static_cast<int>(first.arms[ArmIndex(CacheArm::kSame)].ttft_ms.size());
  const bool sees = t.same_vs_control.p_value <= first.plan.alpha_per_look ||
                    first.cached.positive_control;
  if (!sees) {
    same.AddFailure(absl::StrFormat(
        "%s's repeats with its own salt were not faster than never-seen "
        "prefixes (p=%s): no salted hit can be seen, so no salt isolation "
        "can be vouched for",
        first.writer, KsPValueText(t.same_vs_control.p_value)));
  }
  same.stats = {
      {"same_faster_than_control_p", t.same_vs_control.p_value},
      {"cached_tokens_positive_control", first.cached.positive_control}};
  same.Judge({first.writer});
  rows.push_back(std::move(same));
  for (const SaltPairOutcome& p : pairs) {
    DetectorCoverage d = CacheTimingCoverage(p.out);
    d.name = p.pair.check;
    d.findings = static_cast<int>(p.out.fired.size());
    d.stats["cached_tokens_cross_hits"] =
        p.out.cached.hits[ArmIndex(CacheArm::kCross)];
    d.Judge({p.out.writer, p.out.reader});
    rows.push_back(std::move(d));
  }
  return rows;
}

json SaltDetails(const std::vector<SaltPairOutcome>& pairs) {
  json checks = json::object();
  std::vector<std::string> levels;
  for (const SaltPairOutcome& p : pairs) {
    json d = CacheAuditDetails(p.out);
    d["meaning_of_a_hit"] = p.pair.meaning;
    d["finding_kind"] = p.pair.finding_kind;
    levels.push_back(
        absl::StrCat(p.pair.check, " ", d["level"].get<std::string>()));
    checks[p.pair.check] = std::move(d);
  }
  return {{"salts", true}, {"levels", levels}, {"checks", checks}};
}

std::vector<Check> SaltChecks(const std::vector<SaltPairOutcome>& pairs) {
  std::vector<Check> out;
  if (pairs.empty()) return out;
  const CacheAuditOutcome& first = pairs.front().out;
  const bool sees =
      first.tests.same_vs_control.p_value <= first.plan.alpha_per_look ||
      first.cached.positive_control;
  out.push_back(
      {"salt_same", absl::StrCat(first.writer, " then ", first.writer),
       sees ? "passed" : "failed",
       absl::StrFormat("same-salt repeats faster than misses: p=%s%s",
                       KsPValueText(first.tests.same_vs_control.p_value),
                       first.cached.positive_control
                           ? "; cached tokens reported on repeats"
                           : "")});
  for (const SaltPairOutcome& p : pairs) {
    const SharingLevel level = p.out.level.value_or(SharingLevel::kUndecided);
    out.push_back(
        {p.pair.check, absl::StrCat(p.out.writer, " then ", p.out.reader),
         level == SharingLevel::kCrossTenant  ? "failed"
         : level == SharingLevel::kSameTenant ? "passed"
                                              : "skipped",
         absl::StrFormat("level %s: reader faster than misses p=%s, writer's "
                         "repeats faster than the reader's p=%s",
                         SharingLevelName(level),
                         KsPValueText(p.out.tests.cross_vs_control.p_value),
                         KsPValueText(p.out.tests.same_vs_cross.p_value))});
  }
  return out;
}

Finding SaltFinding(const SaltPairOutcome& p, const std::string& signal,
                    const std::vector<int64_t>& probe_ids) {
  Finding f = CrossTenantFinding(p.out, signal, probe_ids);
  f.kind = signal == "cache_refusal" ? "cross_salt_cache_refusal"
                                     : p.pair.finding_kind;
  f.severity = p.pair.severity;
  f.detector = p.pair.check;
  f.detail["check"] = p.pair.check;
  f.detail["meaning"] = p.pair.meaning;
  return f;
}

}  // namespace kvcanary::auditor
