// The output scan: another tenant's canary marker in an answer is its data
// in this tenant's answer — the leak itself, proven by a marker only that
// tenant's prompts carried. Coverage: plants (prompts dense with markers)
// the target processed whole, since only a plant whose prompt was read
// whole can leak it; a plant the target cut is never coverage.
#ifndef KVCANARY_AUDITOR_DETECTORS_OUTPUT_SCAN_H_
#define KVCANARY_AUDITOR_DETECTORS_OUTPUT_SCAN_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "auditor/result/finding.h"
#include "canaries/scanner.h"

namespace kvcanary::auditor {

// Foreign markers in an output the probing tenant received: a marker
// planted by another tenant (exact: critical; a partial run: high), or a
// marker shape of no registered marker (another campaign's: high). Own
// markers are not findings, and neither is a run of another tenant's marker
// that something other than a leak explains: a run lying within a run of
// one of the probing tenant's own markers (two markers share some 3-word
// window about once in 85,000 pairs), or one whose words `prompt`, the
// probe's own prompt, holds too (a target may repeat what it was sent; ""
// if not known). A finding's words_matched is its longest unexplained run.
std::vector<Finding> ScanOutput(const canaries::MarkerScanner& scanner,
                                absl::string_view output,
                                const std::string& probe_tenant,
                                const std::string& probe_kind,
                                absl::string_view prompt = "");

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_DETECTORS_OUTPUT_SCAN_H_
