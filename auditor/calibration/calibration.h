// What a campaign measured about its target alone, before any load — how
// it counts prompt tokens, its input limit, the golden answers, the nonces
// that echo, the plants and the prefill cost — and which of those
// measurements failed. The detectors judge every answer against it
// (auditor/detectors/); auditor/campaign/calibrate.h measures it. Plain
// data.
#ifndef KVCANARY_AUDITOR_CALIBRATION_CALIBRATION_H_
#define KVCANARY_AUDITOR_CALIBRATION_CALIBRATION_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "auditor/calibration/latency_fit.h"
#include "auditor/result/finding.h"
#include "auditor/target/answer_logprobs.h"
#include "auditor/target/limits.h"
#include "canaries/marker.h"
#include "canaries/templates.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

inline constexpr int kGoldenVariants = 3;
inline constexpr int kPlantMaxTokens = 4;
inline constexpr int kGoldenMaxTokens = 32;
inline constexpr int kEchoMaxTokens = 24;
// Alternatives per position asked of golden answers (within every server's
// bound: OpenAI caps completions at 5) and of scored prompts.
inline constexpr int kGoldenTopLogprobs = 5;
inline constexpr int kScoreTopLogprobs = 1;

// How an answer's log-probabilities are judged, as calibration found them
// alone: two answers alone bitwise the same (our engine, batch-invariant)
// -> every answer under load must be too; else each answer's distance from
// the one alone, against the distances seen under same-tenant load.
enum class LogprobMode { kOff, kExact, kDistance };
const char* LogprobModeName(LogprobMode m);  // off, exact, distance

// What calibration recorded of one kind of log-probabilities (golden
// answers', scored prompts').
struct LogprobCalibration {
  // kExact when every variant's two answers alone, and two under
  // same-tenant load, were bitwise the same; kDistance when some were not
  // (those in by_distance; the others are still judged bitwise, as golden
  // judges its variants one by one).
  LogprobMode mode = LogprobMode::kOff;
  // variant -> the positions answered alone (the first of two).
  std::map<int, std::vector<AnswerLogprob>> alone;
  // variant -> positions answered alone again after a template shift
  // (Campaign::Refit): accepted as alone is.
  std::map<int, std::vector<std::vector<AnswerLogprob>>> also;
  std::set<int> by_distance;
  // Those of by_distance whose two answers alone were bitwise the same but
  // moved under same-tenant load.
  std::set<int> moved_under_load;
  // Why mode is kOff: the target refused the parameter or returned none.
  std::string disabled;
  nlohmann::json ToEvidence() const;
};

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

  // How golden, echo and sniff prompts are worded: kStory, or kInstruct
  // where a chat target echoes a nonce only when told to (Echo, calibrate.cc).
  canaries::Wording wording = canaries::Wording::kStory;
  std::string golden_prefix;          // per campaign
  std::map<int, std::string> golden;  // variant -> answer alone
  // variant -> its prompt's tokens alone, the count a golden probe is
  // expected to have (Campaign::Refit re-checks it).
  std::map<int, int> golden_tokens;
  // Answers alone measured again after a template shift (Campaign::Refit):
  // a model that reads the template's date may answer differently alone,
  // and an answer it gave alone is no divergence.
  std::map<int, std::vector<std::string>> golden_also;
  // Golden variant v's prompt: the prefix, then the text in `wording`.
  std::string GoldenPromptOf(int v) const;
  // Variants that differ alone, or under same-tenant load from alone
  // (the target is not batch-invariant): judged by rate.
  std::set<int> golden_by_rate;
  // Those of golden_by_rate whose two answers alone were the same.
  std::set<int> golden_moved_under_load;
  std::string golden_failure;
  // Golden answers asked with logprobs (logprob_golden) and the golden
  // prompts scored with echo + logprobs (prompt_logprobs).
  LogprobCalibration golden_logprobs;
  LogprobCalibration scored;
  // Golden's same-tenant baseline is needed: golden by rate, or a
  // log-probability judged by distance.
  bool NeedsGoldenBaseline() const {
    return !golden_by_rate.empty() ||
           golden_logprobs.mode == LogprobMode::kDistance ||
           scored.mode == LogprobMode::kDistance;
  }

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

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_CALIBRATION_CALIBRATION_H_
