// `kvcanary-auditor export`: the bundle (auditor/evidence/bundle.h) with the
// files a reviewer reads — the OSCAL assessment results
// (auditor/evidence/oscal.h), one answer sheet per control
// (auditor/evidence/controls.h) and the bundle view
// (auditor/evidence/bundle_html.h) — all derived from the rows the bundle
// cites.
#ifndef KVCANARY_AUDITOR_EVIDENCE_EXPORT_H_
#define KVCANARY_AUDITOR_EVIDENCE_EXPORT_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "auditor/evidence/bundle.h"

namespace kvcanary::auditor {

// Where the derived files go in the bundle.
inline constexpr char kOscalFile[] = "oscal/assessment-results.json";
inline constexpr char kBundleViewFile[] = "index.html";

// The control map built into the binary (docs/controls.json at build time).
const char* DefaultControlsJson();

// The derived files of `evidence` under `controls_json` (the map's text).
absl::StatusOr<std::map<std::string, std::string>> DerivedBundleFiles(
    const BundleEvidence& evidence, const std::string& controls_json);

// The command: `controls_path` empty uses the built-in map. 0 ok, 1 the
// log failed verification (nothing written), 2 error.
int ExportCommand(ExportOptions o, const std::string& controls_path);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_EVIDENCE_EXPORT_H_
