// Boundary: prompts at and past the input limit. A 200 for a prompt past
// the limit (boundary_accepted), or a reported prompt_tokens below what was
// sent (prompt_truncated: the target processed part of the prompt — the
// 2026 incident's over-long prompt, or a plant cut under load) or above it
// (prompt_tokens_mismatch). Every count is the target's own: the auditor
// predicts a prompt's length from counts the target reported alone.
#ifndef KVCANARY_AUDITOR_DETECTORS_BOUNDARY_H_
#define KVCANARY_AUDITOR_DETECTORS_BOUNDARY_H_

#include <string>
#include <vector>

#include "auditor/result/finding.h"

namespace kvcanary::auditor {

// What the probe sent (in calibrated units of prompt tokens), the input
// limit, and what came back.
struct BoundaryObservation {
  int predicted_prompt_tokens = 0;  // from the calibration
  int limit = 0;  // a longer prompt must be refused (TargetLimit::refuse_above)
  int http_status = 0;              // for an error in a 200 stream: its status
  int reported_prompt_tokens = -1;  // usage.prompt_tokens; -1: none
  int tolerance = 0;  // tokens a unique prefix may vary by (calibrated)
  std::string tenant;
  std::string template_name;  // at_limit, past_limit, plant, ladder, ...
  // False for a 200 without a usable answer (a dropped stream, a body
  // without a completion): not judged at all.
  bool answered = true;
};
// Only answers: a 200 past the limit (boundary_accepted), a 200 whose
// usage.prompt_tokens
// is below what was sent (prompt_truncated) or otherwise disagrees with it
// (prompt_tokens_mismatch).
std::vector<Finding> JudgeBoundary(const BoundaryObservation& o);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_DETECTORS_BOUNDARY_H_
