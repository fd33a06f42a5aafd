// Reports of one campaign result (docs/campaign-result.schema.json, version
// 1): JUnit XML for CI gates and one self-contained HTML page for people.
// Both are pure functions of the result document; see docs/reports.md for
// the mapping.
#ifndef KVCANARY_AUDITOR_REPORTS_REPORT_H_
#define KVCANARY_AUDITOR_REPORTS_REPORT_H_

#include <string>

#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// JUnit XML: one <testsuite> named kvcanary.<campaign>, one <testcase> per
// detector x tenant (classname kvcanary.<detector>, name <tenant>) — or,
// for a command that lists its `checks`, one per check (classname
// kvcanary.<command>.<check>, name its subject, e.g. "length 257, end"). A
// detector's incidents naming the tenant are a <failure type="findings">,
// a required detector that is inconclusive (or a tenant below its floor) an
// <error type="inconclusive">, a disabled detector <skipped>; otherwise the
// case passes with its coverage in <system-out>. An `error` verdict is one
// errored testcase `campaign`. The suite fails exactly when the verdict is
// not clean. Never throws: missing or mistyped fields render as absent.
// Every string from the document is XML-escaped; characters XML 1.0 does
// not allow (and invalid UTF-8) become U+FFFD.
std::string JunitXml(const nlohmann::json& result);

// One HTML5 page, inline CSS and inline SVG only (no scripts, no external
// assets): verdict banner, summary, a command's checks and own results,
// coverage table, incidents (at most 200
// rows), timeline chart, positive controls, trace nodes and evidence. Every
// string from the document is HTML-escaped. Never throws.
std::string HtmlReport(const nlohmann::json& result);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_REPORTS_REPORT_H_
