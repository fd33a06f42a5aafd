// The bundle view of an export: one HTML5 page for the person who receives
// the bundle — the controls and their answers, the campaigns of the
// window with their verdicts, the open incidents, and the checkpoint the
// bundle is verified against. Inline CSS only: no scripts, no external
// assets; links are relative paths inside the bundle.
#ifndef KVCANARY_AUDITOR_EVIDENCE_BUNDLE_HTML_H_
#define KVCANARY_AUDITOR_EVIDENCE_BUNDLE_HTML_H_

#include <string>
#include <vector>

#include "auditor/evidence/controls.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// `campaigns` as OscalAssessmentResults takes them; answers come from
// AssessControl and link to the sheets AnswerSheets writes. Every string
// from the records is HTML-escaped. Never throws.
std::string BundleHtml(const std::vector<nlohmann::json>& campaigns,
                       const std::vector<Control>& controls,
                       const ExportContext& ctx);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_EVIDENCE_BUNDLE_HTML_H_
