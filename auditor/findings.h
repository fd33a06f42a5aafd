// What the auditor found: a kind, a severity, the detector that found it,
// and details made of ids, hashes and timings only (never text the auditor
// did not write itself).
#ifndef KVCANARY_AUDITOR_FINDINGS_H_
#define KVCANARY_AUDITOR_FINDINGS_H_

#include <string>
#include <vector>

#include "auditor/shadow_ledger.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

enum class Severity { kLow = 1, kMedium = 2, kHigh = 3, kCritical = 4 };
const char* SeverityName(Severity s);

struct Finding {
  std::string kind;  // e.g. "foreign_marker", "trace_foreign_tenant_read"
  Severity severity = Severity::kMedium;
  std::string detector;  // output_scan, golden, echo, boundary, latency, trace
  nlohmann::json detail = nlohmann::json::object();
};

// A shadow-ledger finding as an auditor finding ("trace_<kind>"), with the
// node, page, reader and writer (engine tenant and request ids).
Finding FromLedger(const LedgerFinding& f);

// Findings as a fixed-width text table (kind, severity, detector, detail).
std::string FindingsTable(const std::vector<Finding>& findings);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_FINDINGS_H_
