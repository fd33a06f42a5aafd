// The README's disaggregated demo: the incident reproduced (fault
// admission-abort-lost on, watermarks off, detect, enforce), then the same
// workload with the fault off. Runs `kvcanary-engine up` as child processes
// and talks HTTP to it like any client. Prints ids, counts and verdicts only.
#ifndef KVCANARY_ENGINE_APP_INCIDENT_DEMO_H_
#define KVCANARY_ENGINE_APP_INCIDENT_DEMO_H_

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kvcanary::engine {

// `model_args`: "--model=…", "--tokenizer=…", or empty for the embedded
// default. Returns an error if a leak went unnoticed or a clean run was not
// clean.
absl::Status RunIncidentDemo(const std::vector<std::string>& model_args,
                             FILE* out);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_APP_INCIDENT_DEMO_H_
