#include "auditor/campaign/plant_calibration.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "auditor/detectors/boundary.h"
#include "auditor/target/limits.h"
#include "canaries/templates.h"

namespace kvcanary::auditor {
namespace {

// `story` markers as story paragraphs, then the rest in the compact form:
// the paragraphs are what a small model repeats, the compact sentences fill
// what is left of the limit.
std::string PlantText(const std::vector<canaries::Marker>& markers, int story) {
  const std::vector<canaries::Marker> a(markers.begin(),
                                        markers.begin() + story);
  const std::vector<canaries::Marker> b(markers.begin() + story, markers.end());
  if (b.empty()) return canaries::PlantPrompt(a);
  if (a.empty()) return canaries::CompactPlantPrompt(b);
  return absl::StrCat(canaries::PlantPrompt(a), "\n",
                      canaries::CompactPlantPrompt(b));
}

// A plant's markers: `story` paragraphs, then `compact` sentences; and what
// one more marker costs in each form (0: unknown).
struct PlantMix {
  int story = 0, compact = 0;
  int per_story = 0, per_compact = 0;
};

// Not thread-safe; one Run() per calibration, on its thread.
class PlantCalibrator {
 public:
  PlantCalibrator(const CalibrationOptions& o, int limit, const SendAlone& send,
                  Calibration* c)
      : o_(o), limit_(limit), send_(send), c_(c) {}

  void Run() {
    const std::optional<PlantMix> mix = Size();
    if (!mix.has_value()) return;
    PlantSizing& s = c_->sizing;
    // Fewer markers per plant, more plants: about as many markers in all.
    const int plants_per_tenant =
        std::max(o_.plants_per_tenant,
                 std::min(2 * o_.plants_per_tenant,
                          2 * o_.plants_per_tenant / s.markers_per_plant));
    std::vector<int> sizes, markers;
    for (size_t t = 0; t < o_.tenants.size(); ++t) {
      int counter = 0;
      for (int p = 0; p < plants_per_tenant; ++p) {
        std::optional<Plant> plant = Build(static_cast<int>(t), *mix, &counter);
        if (plant.has_value()) {
          sizes.push_back(plant->prompt_tokens);
          markers.push_back(static_cast<int>(plant->marker_ids.size()));
          c_->plants[t].push_back(*std::move(plant));
        }
        if (c_->plants[t].size() != static_cast<size_t>(p + 1)) ++s.dropped;
      }
    }
    if (sizes.empty()) {
      c_->plant_failure = "no plant was answered whole alone";
      return;
    }
    std::sort(sizes.begin(), sizes.end());
    std::sort(markers.begin(), markers.end());
    s.median_tokens = sizes[sizes.size() / 2];
    s.markers_per_plant = markers[markers.size() / 2];
    s.fill = static_cast<double>(s.median_tokens) / limit_;
  }

 private:
  const AuditTenant& first() const { return o_.tenants[0]; }
  canaries::Marker Marker(int tenant, int counter) const {
    return PlantMarker(o_.secret_key, o_.tenants[tenant].name, o_.campaign_id,
                       counter);
  }

  // The prompt tokens of `text` alone, or -1 if it was not answered with a
  // count.
  int Measure(const AuditTenant& t, const std::string& text) {
    const Completion c = send_(t, text, kPlantMaxTokens, false);
    return c.usable && c.prompt_tokens > 0 ? c.prompt_tokens : -1;
  }

  // The auditor's prediction of `text`'s count: its halves alone plus the
  // join of the break between them (a paragraph or sentence break if it
  // has one, else a word's); nullopt if it cannot be made.
  std::optional<int> Predict(const AuditTenant& t, const std::string& text) {
    const bool sentences[kPlantBreaks] = {joins_[0].has_value(),
                                          joins_[1].has_value(), false};
    const bool words[kPlantBreaks] = {false, false, joins_[2].has_value()};
    std::optional<PlantSplit> split = SplitPlant(text, sentences);
    if (!split.has_value()) split = SplitPlant(text, words);
    if (!split.has_value()) return std::nullopt;
    const int left = Measure(t, text.substr(0, split->at));
    const int right = Measure(t, text.substr(split->at + 1));
    if (left <= 0 || right <= 0) return std::nullopt;
    return left + right + *joins_[static_cast<int>(split->kind)];
  }

  // One sample of a join: `text` (counted `count` alone, -1 if not) split
  // at its break of `kind` nearest the middle, its halves counted alone.
  void SampleJoin(const std::string& text, int count, PlantBreak kind,
                  std::vector<int> (&samples)[kPlantBreaks]) {
    bool allowed[kPlantBreaks] = {false, false, false};
    allowed[static_cast<int>(kind)] = true;
    const std::optional<PlantSplit> split = SplitPlant(text, allowed);
    if (count <= 0 || !split.has_value()) return;
    const int left = Measure(first(), text.substr(0, split->at));
    const int right = Measure(first(), text.substr(split->at + 1));
    if (left > 0 && right > 0) {
      samples[static_cast<int>(kind)].push_back(count - left - right);
    }
  }

  // The joins, from plants of one and two markers alone (their counts
  // given, -1 if not measured): each break kind on the texts that have one;
  // false (plant_failure set) if none could be measured.
  bool Joins(int story1, int story2, int compact1, int compact2,
             const std::vector<canaries::Marker>& two) {
    std::vector<int> samples[kPlantBreaks];
    const std::string s1 = PlantText({two[0]}, 1), s2 = PlantText(two, 2);
    const std::string c1 = PlantText({two[0]}, 0), c2 = PlantText(two, 0);
    SampleJoin(s2, story2, PlantBreak::kParagraph, samples);
    SampleJoin(s1, story1, PlantBreak::kSentence, samples);
    SampleJoin(c2, compact2, PlantBreak::kSentence, samples);
    SampleJoin(c1, compact1, PlantBreak::kWord, samples);
    SampleJoin(s1, story1, PlantBreak::kWord, samples);
    int spread = 0;
    for (int k = 0; k < kPlantBreaks; ++k) {
      if (samples[k].empty()) continue;
      joins_[k] = samples[k][0];
      spread = std::max(
          spread, *std::max_element(samples[k].begin(), samples[k].end()) -
                      *std::min_element(samples[k].begin(), samples[k].end()));
    }
    c_->join_paragraph = joins_[0].value_or(0);
    c_->join_sentence = joins_[1].value_or(0);
    c_->join_word = joins_[2].value_or(0);
    c_->plant_tolerance = c_->tolerance + spread;
    if (!joins_[0] && !joins_[1] && !joins_[2]) {
      c_->plant_failure =
          "no plant's prompt tokens could be predicted: no plant of one or "
          "two markers was answered with counts for it and its halves";
      return false;
    }
    return true;
  }

  // Measures what a marker costs in each form and fits the most markers to
  // the budget; nullopt (plant_failure set) if not even one fits.
  std::optional<PlantMix> Size() {
    PlantSizing& s = c_->sizing;
    s.budget_tokens = limit_ - std::max(8, limit_ / 16);
    // The cost of a marker in each form, from plants of one and two alone.
    const std::vector<canaries::Marker> two = {Marker(0, 0), Marker(0, 1)};
    const int story1 = Measure(first(), PlantText({two[0]}, 1));
    const int story2 = Measure(first(), PlantText(two, 2));
    const int compact1 = Measure(first(), PlantText({two[0]}, 0));
    const int compact2 = Measure(first(), PlantText(two, 0));
    s.measured += 4;
    if (!Joins(story1, story2, compact1, compact2, two)) return std::nullopt;
    // A second marker's cost is known only if both plants were measured;
    // otherwise a form holds one marker of that kind at most.
    PlantMix mix;
    mix.per_story = story2 > story1 && story1 > 0 ? story2 - story1 : 0;
    mix.per_compact =
        compact2 > compact1 && compact1 > 0 ? compact2 - compact1 : 0;
    int used = 0;
    if (story1 > 0 && story1 <= s.budget_tokens) {
      mix.story = mix.per_story == 0
                      ? 1
                      : (s.budget_tokens - story1) / mix.per_story + 1;
      used = story1 + (mix.story - 1) * mix.per_story;
    } else if (compact1 > 0 && compact1 <= s.budget_tokens) {
      mix.compact = 1;
      used = compact1;
    }
    if (mix.story + mix.compact == 0) {
      c_->plant_failure =
          absl::StrCat("a plant of one marker does not fit the limit of ",
                       limit_, " tokens even in the compact form");
      return std::nullopt;
    }
    if (mix.per_compact > 0) {
      mix.compact += (s.budget_tokens - used) / mix.per_compact;
    }
    s.form = mix.story == 0     ? "compact"
             : mix.compact == 0 ? "story"
                                : "story+compact";
    s.markers_per_plant = mix.story + mix.compact;
    return mix;
  }

  // A plant the target cut alone: a finding, never a plant.
  void CutAlone(int t, int predicted, int reported) {
    ++c_->sizing.cut;
    BoundaryObservation obs;
    obs.predicted_prompt_tokens = predicted;
    obs.limit = 0;  // not judged against a limit: the cut is the finding
    obs.http_status = 200;
    obs.reported_prompt_tokens = reported;
    obs.tolerance = c_->plant_tolerance;
    obs.tenant = o_.tenants[t].name;
    obs.template_name = "plant";
    for (Finding& f : JudgeBoundary(obs)) c_->findings.push_back(std::move(f));
  }

  // Whether a plant counted `reported` alone against its prediction was
  // cut, as a finding must be proven: short of the prediction by more than
  // a prediction can miss (the plant tolerance and 2% of the plant, at
  // least 2 tokens: a join the calibration did not sample), and counted the
  // same when sent again (a count that moves is not a cut). A shortfall
  // below that is a plant not used, not a finding; the boundary probes
  // judge the limit itself.
  bool ClearlyCut(int t, const std::string& text, int predicted, int reported) {
    const int margin = c_->plant_tolerance + std::max(2, predicted / 50);
    if (predicted - reported <= margin) return false;
    ++c_->sizing.measured;
    return Measure(o_.tenants[t], text) == reported;
  }

  // A plant of tenant `t` from its markers *counter on whose count alone
  // is whole by the prediction and under the limit, and *counter moved past
  // them; nullopt if none in a few tries.
  std::optional<Plant> Build(int t, const PlantMix& mix, int* counter) {
    const int smallest_per =
        std::max(1, mix.per_compact > 0
                        ? std::min(mix.per_compact, std::max(mix.per_story, 1))
                        : mix.per_story);
    int total = std::min(mix.story + mix.compact, markers_cap_);
    for (int attempt = 0; attempt < 4 && total >= 1; ++attempt) {
      std::vector<canaries::Marker> markers;
      for (int k = 0; k < total; ++k) {
        markers.push_back(Marker(t, *counter + k));
      }
      Plant plant;
      plant.text = PlantText(markers, std::min(mix.story, total));
      const std::optional<int> predicted = Predict(o_.tenants[t], plant.text);
      plant.prompt_tokens = Measure(o_.tenants[t], plant.text);
      ++c_->sizing.measured;
      const CountFate fate =
          predicted.has_value()
              ? JudgeCount(*predicted, plant.prompt_tokens, c_->plant_tolerance)
              : CountFate::kUnknown;
      if (fate == CountFate::kWhole && *predicted < limit_) {
        plant.predicted_tokens = *predicted;
        for (const canaries::Marker& mk : markers) {
          plant.marker_ids.push_back(mk.id);
        }
        *counter += total;
        return plant;
      }
      int fewer = 1;
      if (fate == CountFate::kCut) {
        if (ClearlyCut(t, plant.text, *predicted, plant.prompt_tokens)) {
          CutAlone(t, *predicted, plant.prompt_tokens);
        } else {
          ++c_->sizing.dropped;  // not whole, but no proof of a cut
        }
        // From now on no larger than what the target kept of this one.
        const int fit = static_cast<int>(
            static_cast<int64_t>(total) *
            std::max(0, plant.prompt_tokens - c_->plant_tolerance) /
            std::max(1, *predicted));
        fewer = std::max(1, total - fit);
        markers_cap_ = total - fewer;
      } else {
        // Past the limit (or unmeasured): smaller by about the overshoot.
        const int size = predicted.value_or(plant.prompt_tokens);
        if (size > 0) {
          const int over = size - (limit_ - 1);
          fewer = std::max(1, (over + smallest_per - 1) / smallest_per);
        }
      }
      total -= fewer;
    }
    return std::nullopt;
  }

  const CalibrationOptions& o_;
  const int limit_;
  const SendAlone& send_;
  Calibration* c_;
  std::optional<int> joins_[kPlantBreaks];  // by PlantBreak, where measured
  int markers_cap_ = INT_MAX;               // after a plant was cut alone
};

}  // namespace

std::optional<PlantSplit> SplitPlant(const std::string& text,
                                     const bool (&allowed)[kPlantBreaks]) {
  std::optional<PlantSplit> best;
  const size_t middle = text.size() / 2;
  auto distance = [middle](size_t at) {
    return at > middle ? at - middle : middle - at;
  };
  auto word = [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c));
  };
  for (size_t i = 1; i + 1 < text.size(); ++i) {
    PlantSplit s{i, PlantBreak::kParagraph};
    if (text[i] == '\n' && text.compare(i + 1, 9, "Once upon") == 0) {
      s.kind = PlantBreak::kParagraph;
    } else if (text[i] == ' ' && text[i - 1] == '.' &&
               text.compare(i + 1, 4, "The ") == 0) {
      s.kind = PlantBreak::kSentence;
    } else if (text[i] == ' ' && word(text[i - 1]) && word(text[i + 1])) {
      s.kind = PlantBreak::kWord;
    } else {
      continue;
    }
    if (!allowed[static_cast<int>(s.kind)]) continue;
    if (!best.has_value() || distance(i) < distance(best->at)) best = s;
  }
  return best;
}

void CalibratePlants(const CalibrationOptions& o, int limit,
                     const SendAlone& send, Calibration* c) {
  PlantCalibrator(o, limit, send, c).Run();
}

}  // namespace kvcanary::auditor
