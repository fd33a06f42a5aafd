// The timeline section of the HTML report (auditor/reports/report.h's
// HtmlReport): probes and errors per bucket as lines in the top panel,
// findings per bucket as bars in the bottom one, one time axis, at most
// 550 drawn buckets, all inline SVG.
#ifndef KVCANARY_AUDITOR_REPORTS_HTML_TIMELINE_H_
#define KVCANARY_AUDITOR_REPORTS_HTML_TIMELINE_H_

#include <string>

#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// Appends the section for campaign-result `r`'s `timeline` ("No timeline
// recorded." where it has no bucket; nothing where it has no timeline).
void AppendHtmlTimeline(const nlohmann::json& r, std::string* out);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_REPORTS_HTML_TIMELINE_H_
