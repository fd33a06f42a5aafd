// The campaign's calibration, alone (one request at a time, before any
// load; golden answers also under same-tenant load, SendLoaded): how the
// target counts prompt tokens, its input limit (advertised
// or measured), which nonces echo and in which wording, golden answers, plants
// sized to the limit and measured whole, and the prefill cost per token — what
// auditor/calibration/calibration.h holds for the detectors. Every request
// whose timing or cache state matters carries a unique prefix, so no
// prompt cache can serve it. Failures are recorded per detector, never
// guessed around: a failed measurement makes that detector inconclusive.
#ifndef KVCANARY_AUDITOR_CAMPAIGN_CALIBRATE_H_
#define KVCANARY_AUDITOR_CAMPAIGN_CALIBRATE_H_

#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "auditor/calibration/calibration.h"
#include "auditor/target/completion.h"
#include "auditor/target/limits.h"
#include "auditor/target/prompts.h"
#include "auditor/target/tenants.h"
#include "canaries/marker.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// Sends one request alone and parses it.
using SendAlone = std::function<Completion(const AuditTenant& tenant,
                                           const std::string& prompt,
                                           int max_tokens, bool stream)>;

// Sends one request (not streamed, `extra` fields added to its body) with
// the campaign's other concurrency − 1 slots filled by requests of the same
// tenant started at the same moment, and parses it: the batch shapes the
// load will have, without another tenant in them. A target that is not
// batch-invariant answers differently here than alone; a healthy one
// answers like the campaign's same-tenant baseline.
using SendLoaded = std::function<Completion(
    const AuditTenant& tenant, const std::string& prompt, int max_tokens,
    const nlohmann::json& extra)>;

struct CalibrationOptions {
  std::vector<AuditTenant> tenants;
  std::string secret_key;  // the campaign's marker key
  std::string campaign_id;
  int flag_limit = 0;             // --max-prompt-tokens; 0: discover
  TargetLimit advertised;         // what the target advertises
  int max_ladder_tokens = 16384;  // the ladder's ceiling
  int plants_per_tenant = 8;
  int nonce_candidates = 8;
  int latency_rounds = 5;
  // Requests go through chat completions: echo is tried in each wording
  // (canaries::Wording), story first, and golden and sniff prompts follow
  // the one that echoed.
  bool chat = false;
  // Golden variants are also sent twice this way; one whose answers there
  // differ from alone is judged by rate, like one that differs alone.
  // Empty: alone only (unit tests of the steps alone).
  SendLoaded send_loaded;
};

// The marker of (tenant, counter) in a campaign: plants use counters from
// 0 up, consecutively, and the campaign's scanner registers the same ones.
canaries::Marker PlantMarker(absl::string_view secret_key,
                             absl::string_view tenant,
                             absl::string_view campaign, int counter);

Calibration Calibrate(const CalibrationOptions& options, const SendAlone& send);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_CAMPAIGN_CALIBRATE_H_
