// Echo: a probe asks the model to repeat a nonce from its own prompt; an
// answer with none of the nonce's words means the prompt was not
// processed (replaced, truncated, or another request's KV attended to).
// Only nonces the model echoed alone are used; a model that never echoes
// leaves the detector disabled, saying so.
#ifndef KVCANARY_AUDITOR_DETECTORS_ECHO_H_
#define KVCANARY_AUDITOR_DETECTORS_ECHO_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "auditor/result/finding.h"
#include "canaries/marker.h"

namespace kvcanary::auditor {

// The answer to a probe that asks to repeat `nonce` must hold at least one
// of its words; none is an echo_failure.
std::optional<Finding> CheckEcho(const canaries::Marker& nonce,
                                 absl::string_view output,
                                 const std::string& tenant);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_DETECTORS_ECHO_H_
