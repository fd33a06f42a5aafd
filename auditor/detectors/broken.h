// The hidden --test-break=DETECTOR: a detector broken on purpose, as a
// decorator around the real one. It runs as the real one does (it follows,
// tallies and states its coverage) but everything it finds is dropped, in
// the campaign and in its positive control alike — so a test can show that
// a detector that finds nothing fails its control and the verdict is then
// never clean. Never used in production.
#ifndef KVCANARY_AUDITOR_DETECTORS_BROKEN_H_
#define KVCANARY_AUDITOR_DETECTORS_BROKEN_H_

#include <memory>

#include "auditor/detectors/detector.h"

namespace kvcanary::auditor {

std::unique_ptr<Detector> BreakDetector(std::unique_ptr<Detector> real);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_DETECTORS_BROKEN_H_
