// The campaign's plants, calibrated alone (auditor/campaign/calibrate.h):
// sized to the input limit from what a marker costs in each form, each
// plant's prompt tokens PREDICTED by the auditor — its two halves counted
// alone plus the join of the break between them, calibrated on plants of
// one and two markers — and a plant kept only if the target's count for it
// alone is whole by that prediction. A plant the target cut alone (fewer
// tokens than predicted: a server that keeps part of an over-long prompt,
// whatever limit it states) is a prompt_truncated finding, is never used,
// and later plants are built no larger than what it kept.
#ifndef KVCANARY_AUDITOR_CAMPAIGN_PLANT_CALIBRATION_H_
#define KVCANARY_AUDITOR_CAMPAIGN_PLANT_CALIBRATION_H_

#include <cstddef>
#include <optional>
#include <string>

#include "auditor/campaign/calibrate.h"

namespace kvcanary::auditor {

// Where a plant's text is split for its prediction.
enum class PlantBreak {
  kParagraph,  // the "\n" before a story paragraph ("Once upon ...")
  kSentence,   // the " " between a "." and a sentence starting "The "
  kWord,       // a " " between two words (a plant of one sentence)
};
inline constexpr int kPlantBreaks = 3;
struct PlantSplit {
  size_t at = 0;  // the halves: text[0, at) and text[at + 1, end)
  PlantBreak kind = PlantBreak::kParagraph;
};
// The break of `text` nearest its middle among the kinds allowed
// (allowed[kind]); nullopt if it has none.
std::optional<PlantSplit> SplitPlant(const std::string& text,
                                     const bool (&allowed)[kPlantBreaks]);

// Fills c->plants, c->sizing, the joins, c->plant_tolerance and
// c->plant_failure, appends a finding per plant cut alone to c->findings,
// and sends through `send` (which counts c->requests). `limit`: the prompt
// tokens plants are sized to. REQUIRES: c->tolerance calibrated, c->plants
// sized to the tenants.
void CalibratePlants(const CalibrationOptions& o, int limit,
                     const SendAlone& send, Calibration* c);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_CAMPAIGN_PLANT_CALIBRATION_H_
