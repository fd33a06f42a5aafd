// Positive controls through the live path: each detector is run, with the
// campaign's own objects after they are built, on an input it must flag
// (and one it must not): the campaign's scanner on another tenant's marker,
// the calibrated golden answers, nonces and latency model, the boundary
// judgement on a canned response parsed by the real completion parser
// (an error inside a 200 stream included), and a real TraceFollower on a
// canned kvt1 stream served over HTTP. A detector whose control fails
// cannot vouch for anything: the campaign marks it inconclusive.
#ifndef KVCANARY_AUDITOR_CAMPAIGN_POSITIVE_CONTROLS_H_
#define KVCANARY_AUDITOR_CAMPAIGN_POSITIVE_CONTROLS_H_

#include <map>
#include <string>
#include <vector>

#include "auditor/campaign/calibration.h"
#include "canaries/marker.h"
#include "canaries/scanner.h"

namespace kvcanary::auditor {

struct ControlInputs {
  const canaries::MarkerScanner* scanner = nullptr;  // compiled
  std::vector<std::string> tenants;                  // >= 2
  // A registered marker of each tenant (the scanner knows them).
  std::vector<canaries::Marker> markers;
  const Calibration* calibration = nullptr;
};

// detector -> passed. A detector whose control could not be run (echo with
// no echoing nonce, latency or boundary without a calibration) is absent:
// its state already says why.
std::map<std::string, bool> RunPositiveControls(const ControlInputs& in);

// The canned trace control alone: a TraceFollower following a local HTTP
// server that streams the incident in miniature (tenant 2's page freed
// unscrubbed and read by tenant 1). True if it reports tenant 2's bytes
// read by tenant 1.
bool TraceControlFires();

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_CAMPAIGN_POSITIVE_CONTROLS_H_
