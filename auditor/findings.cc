#include "auditor/findings.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

Finding FromLedger(const LedgerFinding& f) {
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
  out.detail = {{"node", NodeName(f.node)},
                {"page", f.page.value()},
                {"reader", Identity(f.reader)},
                {"writer", Identity(f.writer)},
                {"slots", f.slots}};
  if (f.kind == LedgerFindingKind::kTransferMismatch) {
    out.detail["pages_sent"] = f.pages_sent;
    out.detail["pages_expected"] = f.pages_expected;
  }
  if (f.kind == LedgerFindingKind::kEngineViolation) {
    out.detail["engine_kind"] = ViolationKindName(f.engine_kind);
  }
  return out;
}

std::string FindingsTable(const std::vector<Finding>& findings) {
  std::string out = absl::StrFormat("%-30s %-9s %-12s %s\n", "KIND", "SEVERITY",
                                    "DETECTOR", "DETAIL");
  for (const Finding& f : findings) {
    std::string detail = f.detail.dump();
    if (detail.size() > 160) detail = detail.substr(0, 157) + "...";
    absl::StrAppendFormat(&out, "%-30s %-9s %-12s %s\n", f.kind,
                          SeverityName(f.severity), f.detector, detail);
  }
  return out;
}

}  // namespace kvcanary::auditor
