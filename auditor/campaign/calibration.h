// Calibration, alone (one request at a time, before any load): how the
// target counts prompt tokens, its input limit (advertised or measured),
// golden answers, which nonces echo, plants sized to the limit and measured
// whole, and the prefill cost per token. Every request whose timing or
// cache state matters carries a unique prefix, so no prompt cache can
// serve it. Failures are recorded per detector, never guessed around: a
// failed measurement makes that detector inconclusive.
#ifndef KVCANARY_AUDITOR_CAMPAIGN_CALIBRATION_H_
#define KVCANARY_AUDITOR_CAMPAIGN_CALIBRATION_H_

#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "auditor/detectors/latency.h"
#include "auditor/result/finding.h"
#include "auditor/target/completion.h"
#include "auditor/target/limits.h"
#include "auditor/target/prompts.h"
#include "auditor/target/tenants.h"
#include "canaries/marker.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

inline constexpr int kGoldenVariants = 3;
inline constexpr int kPlantMaxTokens = 4;
inline constexpr int kGoldenMaxTokens = 32;
inline constexpr int kEchoMaxTokens = 24;

// One plant: its exact text, the prompt tokens the auditor predicts for it
// (its two halves' counts alone, plus the calibrated join), and what the
// target reported for it alone. It is kept only if that count was whole by
// the prediction; under load it counts as accepted whole only when the
// target's count matches the prediction within plant_tolerance.
struct Plant {
  std::string text;
  std::vector<std::string> marker_ids;
  int predicted_tokens = 0;
  int prompt_tokens = 0;  // reported alone
};

struct PlantSizing {
  // "story" (PlantPrompt paragraphs), "compact" (CompactPlantPrompt) or
  // "story+compact" (paragraphs, then compact sentences to fill the rest).
  std::string form;
  int markers_per_plant = 0;
  int budget_tokens = 0;  // the limit minus a margin
  int median_tokens = 0;
  double fill = 0;  // median_tokens / limit
  int measured = 0, dropped = 0;
  int cut = 0;  // plants the target cut alone (prompt_truncated findings)
};

struct Calibration {
  // Prompt tokens = base + units × unit_tokens (± tolerance, how much the
  // unique prefixes vary) for BoundaryPrompt; + pads where a one-token pad
  // word was found (CountPrompt, auditor/target/prompts.h).
  int unit_tokens = 0, base_tokens = 0, tolerance = 0;
  std::string pad;
  TargetLimit limit;
  std::optional<LadderResult> ladder;  // when measured
  int at_limit_units = 0;              // the longest prompt within the limit
  int past_limit_units = 0;            // 0: no past-limit probe (limit unknown)
  std::string boundary_failure;

  std::string golden_prefix;          // per campaign
  std::map<int, std::string> golden;  // variant -> answer alone
  std::set<int> golden_by_rate;       // variants that differ even alone
  std::string golden_failure;

  std::vector<std::optional<canaries::Marker>> nonces;  // per tenant
  std::string echo_disabled;  // no tenant's nonce echoes alone
  std::string echo_failure;   // no echo answer had any text

  std::vector<std::vector<Plant>> plants;  // per tenant
  PlantSizing sizing;
  // A plant's count = its halves' counts alone + the join of the break it
  // was split at (a paragraph's "\n", a sentence's or a word's " "),
  // measured on plants of one and two markers; within plant_tolerance
  // (tolerance plus how much a join varied between the texts measured).
  int join_paragraph = 0, join_sentence = 0, join_word = 0;
  int plant_tolerance = 0;
  std::string plant_failure;

  LatencyModel latency;
  std::vector<std::pair<int, double>> latency_samples;  // (tokens, ttft ms)

  std::vector<Finding> findings;  // e.g. the ladder met a silent truncation
  int requests = 0;               // requests sent

  nlohmann::json ToEvidence() const;
};

// Sends one request alone and parses it.
using SendAlone = std::function<Completion(const AuditTenant& tenant,
                                           const std::string& prompt,
                                           int max_tokens, bool stream)>;

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
};

// The marker of (tenant, counter) in a campaign: plants use counters from
// 0 up, consecutively, and the campaign's scanner registers the same ones.
canaries::Marker PlantMarker(absl::string_view secret_key,
                             absl::string_view tenant,
                             absl::string_view campaign, int counter);

Calibration Calibrate(const CalibrationOptions& options, const SendAlone& send);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_CAMPAIGN_CALIBRATION_H_
