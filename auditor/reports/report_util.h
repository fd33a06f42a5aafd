// Helpers both reports of auditor/reports/report.h share (junit_report.cc and
// html_report.cc): reading the campaign-result document leniently, escaping
// its strings, and the parts of a detector or incident both render. Internal
// to the reports; not for other callers.
#ifndef KVCANARY_AUDITOR_REPORTS_REPORT_UTIL_H_
#define KVCANARY_AUDITOR_REPORTS_REPORT_UTIL_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace kvcanary::auditor::report_internal {

// ---- Reading the document leniently: a missing or mistyped field is absent.

const nlohmann::json& Get(const nlohmann::json& j, const char* key);
// A string as text; numbers and booleans as JSON; anything else "".
std::string Text(const nlohmann::json& v);
std::string Str(const nlohmann::json& j, const char* key);
int64_t Int(const nlohmann::json& v, int64_t missing = 0);
double Num(const nlohmann::json& v, double missing = 0);
const nlohmann::json& Arr(const nlohmann::json& j, const char* key);
// 12345 -> "12,345": counts are read by people.
std::string Count(int64_t n);

// ---- Text that XML 1.0 and HTML accept.

// Any string from the document, ready for XML or HTML text or attributes.
// `text`: an XML text node, where tabs and line feeds may stay as they are.
std::string Esc(std::string_view raw, bool text = false);

// ---- The parts both reports share.

bool Names(const nlohmann::json& incident, const std::string& tenant);
int SeverityRank(const std::string& severity);
// "globex" or "-" for a null writer or reader.
std::string TenantOrDash(const nlohmann::json& incident, const char* role);
// "31 plants accepted whole, floor 20".
std::string CoverageLine(const nlohmann::json& detector,
                         const std::string& tenant);
bool BelowFloor(const nlohmann::json& detector, const std::string& tenant);

}  // namespace kvcanary::auditor::report_internal

#endif  // KVCANARY_AUDITOR_REPORTS_REPORT_UTIL_H_
