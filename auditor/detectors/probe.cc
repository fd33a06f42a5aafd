#include "auditor/detectors/probe.h"

namespace kvcanary::auditor {

const char* ProbeKindName(ProbeKind k) {
  switch (k) {
    case ProbeKind::kPlant:
      return "plant";
    case ProbeKind::kSniff:
      return "sniff";
    case ProbeKind::kGolden:
      return "golden";
    case ProbeKind::kEcho:
      return "echo";
    case ProbeKind::kAtLimit:
      return "at_limit";
    case ProbeKind::kPastLimit:
      return "past_limit";
  }
  return "unknown";
}

}  // namespace kvcanary::auditor
