// The OSCAL 1.1.2 assessment-results document of an export bundle
// (docs/controls.md): what was tested, against which controls, what was
// seen and what it means, in the form GRC tools import. It validates
// against NIST's published JSON Schema (tests/auditor/evidence/oscal_test.cc).
//
// Layout: `import-ap` points (href "#UUID") at a back-matter resource of
// the same document describing the campaign plan (targets, tenants,
// detectors, window; the plan JSON embedded as base64). One result for the
// export window; one observation (method TEST) per campaign × detector,
// whose subject is the back-matter resource of the campaign's file in the
// bundle; one finding per incident (not-satisfied) and one per control
// (satisfied only when its answer is "Yes, tested"); a risk (status open)
// per open critical incident. Every UUID is a version 5 UUID of what it
// names, so the same export gives the same document.
#ifndef KVCANARY_AUDITOR_EVIDENCE_OSCAL_H_
#define KVCANARY_AUDITOR_EVIDENCE_OSCAL_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "auditor/evidence/controls.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

using OscalContext = ExportContext;

// `campaigns`: campaign records as the bundle writes them (campaign,
// command, target, tenants, started, ended, verdict, reasons, detectors,
// incidents, cited_rows, file). `controls`: the control map; rows without
// an id are skipped. Never throws: missing fields render as absent, and
// times that do not parse fall back to the window's.
nlohmann::json OscalAssessmentResults(
    const std::vector<nlohmann::json>& campaigns,
    const std::vector<Control>& controls, const OscalContext& ctx);

// RFC 4122 version 5 UUID (SHA-1) of `name` in kvcanary's namespace.
std::string Uuid5(absl::string_view name);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_EVIDENCE_OSCAL_H_
