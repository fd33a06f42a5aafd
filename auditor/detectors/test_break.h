// The hidden --test-break=DETECTOR flag: breaks a detector on purpose (the
// scanner finds nothing, golden answers always match, the ledger ignores
// page reads, ...), so a test can show that the detector's positive control
// fails and the verdict is then not clean. Never set in production use.
#ifndef KVCANARY_AUDITOR_DETECTORS_TEST_BREAK_H_
#define KVCANARY_AUDITOR_DETECTORS_TEST_BREAK_H_

#include <set>
#include <string>

#include "absl/strings/string_view.h"

namespace kvcanary::auditor {

// Replaces the set of broken detectors. Call before a campaign starts, from
// one thread; TestBroken is then safe from any thread.
void SetTestBreak(const std::set<std::string>& detectors);
bool TestBroken(absl::string_view detector);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_DETECTORS_TEST_BREAK_H_
