#include "auditor/calibration/calibration.h"

#include "absl/strings/str_cat.h"
#include "common/sha256.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

const char* LogprobModeName(LogprobMode m) {
  switch (m) {
    case LogprobMode::kOff:
      return "off";
    case LogprobMode::kExact:
      return "exact";
    case LogprobMode::kDistance:
      return "distance";
  }
  return "unknown";
}

// Counts and digests only: positions hold the target's text.
json LogprobCalibration::ToEvidence() const {
  json variants = json::object();
  for (const auto& [v, positions] : alone) {
    json list = json::array();
    for (const AnswerLogprob& p : positions) {
      list.push_back(
          {p.token, p.logprob.has_value() ? json(*p.logprob) : json(nullptr)});
    }
    variants[std::to_string(v)] = {{"positions", positions.size()},
                                   {"sha256", Sha256Hex(list.dump())}};
  }
  return {{"mode", LogprobModeName(mode)},
          {"by_distance", by_distance},
          {"moved_under_load", moved_under_load},
          {"disabled", disabled},
          {"variants", variants}};
}

std::string Calibration::GoldenPromptOf(int v) const {
  return absl::StrCat(golden_prefix, " ", canaries::GoldenPrompt(v, wording));
}

json Calibration::ToEvidence() const {
  json plants_json = json::object();
  for (size_t t = 0; t < plants.size(); ++t) {
    json list = json::array();
    for (const Plant& p : plants[t]) {
      list.push_back({{"markers", p.marker_ids},
                      {"predicted_tokens", p.predicted_tokens},
                      {"prompt_tokens", p.prompt_tokens},
                      {"sha256", Sha256Hex(p.text)}});
    }
    plants_json[std::to_string(t)] = list;
  }
  json nonce_ids = json::array();
  for (const auto& n : nonces) {
    nonce_ids.push_back(n ? json(n->id) : json(nullptr));
  }
  json out = {{"unit_tokens", unit_tokens},
              {"base_tokens", base_tokens},
              {"tolerance", tolerance},
              {"pad", pad.empty() ? json(nullptr) : json(pad)},
              {"limit",
               {{"prompt_tokens", limit.prompt_tokens},
                {"refuse_above", limit.refuse_above},
                {"context_tokens", limit.context_tokens},
                {"source", limit.source},
                {"where", limit.where}}},
              {"at_limit_units", at_limit_units},
              {"past_limit_units", past_limit_units},
              {"boundary_failure", boundary_failure},
              {"wording", canaries::WordingName(wording)},
              {"golden_variants", golden.size()},
              {"golden_by_rate", golden_by_rate},
              {"golden_moved_under_load", golden_moved_under_load},
              {"golden_failure", golden_failure},
              {"golden_logprobs", golden_logprobs.ToEvidence()},
              {"scored_prompts", scored.ToEvidence()},
              {"nonces", nonce_ids},
              {"echo_disabled", echo_disabled},
              {"echo_failure", echo_failure},
              {"plants",
               {{"form", sizing.form},
                {"markers_per_plant", sizing.markers_per_plant},
                {"budget_tokens", sizing.budget_tokens},
                {"median_tokens", sizing.median_tokens},
                {"fill", sizing.fill},
                {"dropped", sizing.dropped},
                {"cut_alone", sizing.cut},
                {"join_paragraph", join_paragraph},
                {"join_sentence", join_sentence},
                {"join_word", join_word},
                {"tolerance", plant_tolerance},
                {"per_tenant", plants_json},
                {"failure", plant_failure}}},
              {"latency",
               {{"calibrated", latency.calibrated},
                {"base_ms", latency.base_ms},
                {"per_token_ms", latency.per_token_ms},
                {"intercept_ms", latency.intercept_ms},
                {"r2", latency.r2},
                {"lengths", latency.lengths},
                {"samples", latency_samples.size()},
                {"failure", latency.failure}}},
              {"requests", requests}};
  if (ladder.has_value()) out["ladder"] = ladder->ToJson();
  return out;
}

}  // namespace kvcanary::auditor
