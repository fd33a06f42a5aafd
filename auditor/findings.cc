#include "auditor/findings.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace kvcanary::auditor {

const char* SeverityName(Severity s) {
  switch (s) {
    case Severity::kLow:
      return "low";
    case Severity::kMedium:
      return "medium";
    case Severity::kHigh:
      return "high";
    case Severity::kCritical:
      return "critical";
  }
  return "unknown";
}

Severity SeverityFromName(const std::string& s) {
  if (s == "critical") return Severity::kCritical;
  if (s == "high") return Severity::kHigh;
  if (s == "medium") return Severity::kMedium;
  return Severity::kLow;
}

nlohmann::json Finding::ToJson() const {
  return {{"kind", kind},
          {"severity", SeverityName(severity)},
          {"detector", detector},
          {"probe", probe},
          {"engine_request", engine_request},
          {"reader", reader},
          {"writer", writer},
          {"writer_joined", writer_joined},
          {"group", group},
          {"ts_us", ts_us},
          {"detail", detail}};
}

Finding Finding::FromJson(const nlohmann::json& b) {
  Finding f;
  if (!b.is_object()) return f;
  f.kind = b.value("kind", "");
  f.severity = SeverityFromName(b.value("severity", "low"));
  f.detector = b.value("detector", "");
  f.probe = b.value("probe", int64_t{-1});
  f.engine_request = b.value("engine_request", uint64_t{0});
  f.reader = b.value("reader", "");
  f.writer = b.value("writer", "");
  f.writer_joined = b.value("writer_joined", false);
  f.group = b.value("group", nlohmann::json::object());
  f.ts_us = b.value("ts_us", int64_t{0});
  f.detail = b.value("detail", nlohmann::json::object());
  return f;
}

std::string Rfc3339Utc(int64_t unix_us) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMicros(unix_us),
                          absl::UTCTimeZone());
}

namespace {
const char* NodeName(TraceNode node) {
  switch (node) {
    case TraceNode::kRouter:
      return "router";
    case TraceNode::kPrefill:
      return "prefill";
    case TraceNode::kDecode:
      return "decode";
  }
  return "unknown";
}
nlohmann::json Identity(const StampIdentity& id) {
  return {{"tenant", id.tenant.value()},
          {"request", id.request.value()},
          {"gen", id.generation.value()}};
}
}  // namespace

std::string EngineTenantName(uint32_t engine_tenant,
                             const std::map<uint32_t, std::string>& names) {
  if (engine_tenant == 0) return "";
  auto it = names.find(engine_tenant);
  if (it != names.end()) return it->second;
  return absl::StrCat("engine-tenant-", engine_tenant);
}

Finding FromLedger(const LedgerFinding& f,
                   const std::map<uint32_t, std::string>& tenant_name) {
  Finding out;
  out.detector = "trace";
  out.kind = absl::StrCat("trace_", LedgerFindingKindName(f.kind));
  switch (f.kind) {
    case LedgerFindingKind::kForeignTenantRead:
    case LedgerFindingKind::kLateWrite:
      out.severity = Severity::kCritical;
      break;
    case LedgerFindingKind::kStaleRequestRead:
    case LedgerFindingKind::kTransferMismatch:
    case LedgerFindingKind::kEngineViolation:
      out.severity = Severity::kHigh;
      break;
    case LedgerFindingKind::kUnwrittenRead:
      out.severity = Severity::kMedium;
      break;
  }
  out.ts_us = f.seen_unix_us;
  out.engine_request = f.reader.request.value();
  out.reader = EngineTenantName(f.reader.tenant.value(), tenant_name);
  out.writer = EngineTenantName(f.writer.tenant.value(), tenant_name);
  out.group = {{"node", NodeName(f.node)}};
  out.detail = {{"node", NodeName(f.node)},
                {"reader", Identity(f.reader)},
                {"writer", Identity(f.writer)},
                {"reader_tenant", out.reader},
                {"writer_tenant", out.writer},
                {"writer_shared", f.writer_shared},
                {"slots", f.slots},
                {"event_seq", f.event_seq}};
  if (f.kind == LedgerFindingKind::kTransferMismatch) {
    out.detail["pages_sent"] = f.pages_sent;
    out.detail["pages_expected"] = f.pages_expected;
  } else {
    out.detail["page"] = f.page.value();
  }
  if (f.kind == LedgerFindingKind::kEngineViolation) {
    out.detail["engine_kind"] = ViolationKindName(f.engine_kind);
  }
  return out;
}

}  // namespace kvcanary::auditor
