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
    case ProbeKind::kHangup:
      return "hangup";
    case ProbeKind::kScore:
      return "score";
  }
  return "unknown";
}

const char* HangupStageName(HangupStage s) {
  switch (s) {
    case HangupStage::kQueued:
      return "queued";
    case HangupStage::kPrefill:
      return "prefill";
    case HangupStage::kTransfer:
      return "transfer";
    case HangupStage::kDecode:
      return "decode";
  }
  return "unknown";
}

}  // namespace kvcanary::auditor
