#include "auditor/detectors/output_scan.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "auditor/detectors/registry.h"
#include "auditor/target/limits.h"
#include "common/sha256.h"

namespace kvcanary::auditor {
namespace {

// The runs of the probing tenant's own markers in the scanned text.
std::vector<canaries::MarkerRun> OwnRuns(
    const std::vector<canaries::MarkerHit>& hits,
    const std::string& probe_tenant) {
  std::vector<canaries::MarkerRun> own;
  for (const canaries::MarkerHit& hit : hits) {
    if (hit.marker_id.empty() || hit.owner != probe_tenant) continue;
    own.insert(own.end(), hit.runs.begin(), hit.runs.end());
  }
  return own;
}

// Whether `outer` spans the text of `run`.
bool SpansText(const canaries::MarkerRun& outer,
               const canaries::MarkerRun& run) {
  return outer.offset <= run.offset && run.end <= outer.end;
}

// Whether `outer`, a run of the same marker as `run`, holds its words.
bool HoldsWords(const canaries::MarkerRun& outer,
                const canaries::MarkerRun& run) {
  return outer.marker_word <= run.marker_word &&
         run.marker_word + run.words <= outer.marker_word + outer.words;
}

// The longest run of `hit`, another tenant's marker, that no leak-free
// cause explains; 0 if every run is explained. A run is explained when one
// of `own` (the reader's own markers) spans its text, or when the probe's
// prompt (scanned: `prompt_hits`) holds the same words of the same marker.
int UnexplainedWords(const canaries::MarkerHit& hit,
                     const std::vector<canaries::MarkerRun>& own,
                     const std::vector<canaries::MarkerHit>& prompt_hits) {
  std::vector<canaries::MarkerRun> sent;
  for (const canaries::MarkerHit& p : prompt_hits) {
    if (p.marker_id == hit.marker_id) sent = p.runs;
  }
  int longest = 0;
  for (const canaries::MarkerRun& run : hit.runs) {
    auto explains = [&run](const canaries::MarkerRun& o) {
      return SpansText(o, run);
    };
    auto holds = [&run](const canaries::MarkerRun& s) {
      return HoldsWords(s, run);
    };
    if (std::any_of(own.begin(), own.end(), explains) ||
        std::any_of(sent.begin(), sent.end(), holds)) {
      continue;
    }
    longest = std::max(longest, run.words);
  }
  return longest;
}

}  // namespace

std::vector<Finding> ScanOutput(const canaries::MarkerScanner& scanner,
                                absl::string_view output,
                                const std::string& probe_tenant,
                                const std::string& probe_kind,
                                absl::string_view prompt) {
  std::vector<Finding> out;
  const std::vector<canaries::MarkerHit> hits = scanner.Scan(output);
  const std::vector<canaries::MarkerRun> own = OwnRuns(hits, probe_tenant);
  std::optional<std::vector<canaries::MarkerHit>> prompt_hits;  // lazily
  for (const canaries::MarkerHit& hit : hits) {
    if (!hit.marker_id.empty() && hit.owner == probe_tenant) continue;
    int words = hit.words_matched;
    if (!hit.marker_id.empty()) {
      if (!prompt_hits.has_value()) prompt_hits = scanner.Scan(prompt);
      words = UnexplainedWords(hit, own, *prompt_hits);
      if (words == 0) continue;
    }
    const bool exact = hit.exact && words == hit.words_matched;
    Finding f;
    f.detector = "output_scan";
    f.kind = hit.marker_id.empty() ? "foreign_marker_shape" : "foreign_marker";
    f.severity = exact ? Severity::kCritical : Severity::kHigh;
    f.detail = {{"probe_tenant", probe_tenant},
                {"probe_kind", probe_kind},
                {"marker", hit.marker_id},
                {"marker_owner", hit.owner},
                {"words_matched", words},
                {"exact", exact},
                {"output_sha256", Sha256Hex(output)}};
    f.reader = probe_tenant;
    f.writer = hit.owner;
    out.push_back(std::move(f));
  }
  return out;
}

namespace {

class OutputScanDetector : public DetectorOf<OutputScanDetector> {
 public:
  static DetectorSpec Spec() {
    DetectorSpec s;
    s.name = "output_scan";
    s.summary = "another tenant's canary marker in an answer (the leak)";
    s.unit = "plants accepted whole";
    s.order = 10;
    s.probes = {{ProbeKind::kPlant, 1.0}, {ProbeKind::kSniff, 0.5}};
    return s;
  }

  void Prepare(const CampaignView& view) override {
    Detector::Prepare(view);
    tallies_.assign(view.tenants.size(), Tally{});
  }

  // Any text is scanned, even of an answer that broke off or ended in an
  // error: a leak in it is a leak all the same. Coverage counts whole
  // answers with text only, and never a plant the target cut.
  void Judge(const Probe& p, const Completion& c, const std::vector<Finding>&,
             FindingSink& out) override {
    Tally& n = tallies_[p.tenant];
    if (!c.text.empty()) {
      for (Finding& f :
           ScanOutput(*view().scanner, c.text, tenant_name(p.tenant),
                      ProbeKindName(p.kind), p.prompt)) {
        out.Add(std::move(f));
      }
    }
    bool covers = c.usable && !c.text.empty();
    if (p.kind == ProbeKind::kPlant) {
      ++n.plants_sent;
      // Whole only when the target's count matches the auditor's own
      // prediction (auditor/target/limits.h JudgeCount).
      const CountFate fate =
          c.usable ? JudgeCount(p.predicted, c.prompt_tokens,
                                view().calibration->plant_tolerance)
                   : CountFate::kUnknown;
      if (fate == CountFate::kWhole) ++n.plants_whole;
      if (fate == CountFate::kCut) {
        ++n.plants_cut;
        covers = false;
      }
    }
    if (covers) ++n.scanned;
  }

  std::vector<ControlCase> Controls() const override;
  DetectorCoverage Coverage(int floor) const override;

  void Report(CampaignResult* r) const override {
    for (const Tally& t : tallies_) {
      r->plants.sent += t.plants_sent;
      r->plants.accepted_whole += t.plants_whole;
    }
  }

 private:
  struct Tally {
    int plants_sent = 0, plants_whole = 0, plants_cut = 0;
    int scanned = 0;  // usable answers with text, scanned for markers
  };
  std::vector<Tally> tallies_;  // per tenant
};
KVCANARY_REGISTER_DETECTOR(OutputScanDetector);

// Tenant 0 reads tenant 1's marker (a finding naming both) and its own
// (none), through the campaign's own scanner.
std::vector<ControlCase> OutputScanDetector::Controls() const {
  if (!prepared() || view().control_markers.size() < 2) return {};
  const CampaignView& v = view();
  const std::string reader = v.tenants[0], writer = v.tenants[1];
  const std::string foreign =
      absl::StrCat("and then ", v.control_markers[1].text, " the end");
  const std::string own = v.control_markers[0].text;
  const canaries::MarkerScanner* scanner = v.scanner;
  return {
      {"another tenant's marker in an answer",
       [=](FindingSink& out) {
         for (Finding& f : ScanOutput(*scanner, foreign, reader, "sniff")) {
           out.Add(std::move(f));
         }
       },
       [=](const std::vector<Finding>& got) {
         return std::any_of(got.begin(), got.end(), [&](const Finding& f) {
           return f.kind == "foreign_marker" && f.writer == writer &&
                  f.reader == reader;
         });
       }},
      {"the tenant's own marker",
       [=](FindingSink& out) {
         for (Finding& f : ScanOutput(*scanner, own, reader, "plant")) {
           out.Add(std::move(f));
         }
       },
       [](const std::vector<Finding>& got) { return got.empty(); }},
  };
}

DetectorCoverage OutputScanDetector::Coverage(int floor) const {
  DetectorCoverage d;
  if (!prepared()) return d;
  const Calibration& cal = *view().calibration;
  for (size_t t = 0; t < tallies_.size(); ++t) {
    d.coverage[view().tenants[t]] = tallies_[t].plants_whole;
  }
  if (!cal.plant_failure.empty()) d.AddFailure(cal.plant_failure);
  // Plants that landed prove nothing if the answers hold no text to scan.
  for (size_t t = 0; t < tallies_.size(); ++t) {
    if (tallies_[t].scanned < floor) {
      d.AddFailure(absl::StrCat(view().tenants[t], " got ", tallies_[t].scanned,
                                " answers with text to scan (floor ", floor,
                                ")"));
    }
  }
  int64_t scanned = 0, sent = 0, whole = 0, cut = 0;
  for (const Tally& t : tallies_) {
    scanned += t.scanned;
    sent += t.plants_sent;
    whole += t.plants_whole;
    cut += t.plants_cut;
  }
  d.stats = {{"answers_scanned", scanned},
             {"markers_registered", view().scanner->size()},
             {"plants_sent", sent},
             {"plants_whole", whole},
             {"plants_cut", cut},
             {"plants_cut_alone", cal.sizing.cut},
             {"plant_form", cal.sizing.form},
             {"markers_per_plant", cal.sizing.markers_per_plant},
             {"plant_prompt_tokens", cal.sizing.median_tokens},
             {"fill", cal.sizing.fill}};
  return d;
}

}  // namespace
}  // namespace kvcanary::auditor
