// The control map (docs/controls.json, described in docs/controls.md) and
// the questionnaire answer sheets an export bundle carries: for each
// control, what kvcanary evidence supports it, and, for a set of
// campaigns, the answer that evidence gives.
#ifndef KVCANARY_AUDITOR_EVIDENCE_CONTROLS_H_
#define KVCANARY_AUDITOR_EVIDENCE_CONTROLS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// One kind of kvcanary evidence a control rests on: campaigns of `command`,
// and of those the listed detectors (empty: every detector it ran).
struct ControlEvidence {
  std::string command;  // probe, accept, facts, cache-audit, forensics
  std::vector<std::string> detectors;
  std::string supports;  // one line: what this evidence shows
};

struct Control {
  std::string framework;  // "CSA CCM v4"
  std::string id;         // "IVS-06"; "" = a row left for the user to fill
  std::string oscal_id;   // an OSCAL token: "ccm-ivs-06"
  std::string title;      // "" for licensed texts
  std::string summary;    // our own one line; "" for licensed texts
  bool licensed = false;  // text fields are the user's to fill
  std::string maps_to;    // oscal_id whose evidence this row shares
  std::vector<ControlEvidence> evidence;
};

// A campaign record's string at `key` (else at `alt`); "" if neither is a
// string.
std::string RecordString(const nlohmann::json& j, const char* key,
                         const char* alt = nullptr);

// Parses docs/controls.json. A row with `maps_to` takes that control's
// evidence. kInvalidArgument naming the row: not JSON, a missing or
// non-token oscal_id, a duplicate oscal_id, an unknown maps_to.
absl::StatusOr<std::vector<Control>> ParseControls(absl::string_view text);
absl::StatusOr<std::vector<Control>> LoadControls(const std::string& path);

// Whether `s` is an OSCAL token: a letter or '_', then letters, digits,
// '.', '-', '_' (ASCII only here).
bool IsOscalToken(absl::string_view s);

// The period, origin and checkpoint of an export (what the bundle vouches
// for). Times are RFC 3339.
struct ExportContext {
  std::string origin;
  std::string since, until;
  int64_t tree_size = 0;
  std::string root_hash_hex;
  std::string checkpoint_file;  // path inside the bundle
  std::string generated;        // RFC 3339; "" = `until`
};

// An incident is open unless its `status` says closed, resolved or
// accepted (the verdict JSON has no status: every incident is open).
bool IsOpenIncident(const nlohmann::json& incident);

// What a set of campaigns says about one control.
enum class Answer { kYesTested, kPartially, kNoFindingsOpen, kNoEvidence };
const char* AnswerText(Answer a);  // "Yes, tested", "Partially", ...

struct ControlAssessment {
  Answer answer = Answer::kNoEvidence;
  std::string why;  // one line
  // Indices into the campaign list of the campaigns that bear on it.
  std::vector<size_t> campaigns;
};

// The rule: no campaign of a mapped command in the list → no evidence; an
// open incident of a mapped detector (or, for a command mapped without
// detectors, any) → no, findings open; a campaign that ended in error or
// inconclusive, or a mapped detector that is not active → partially;
// otherwise yes, tested. Campaign records as the bundle writes them
// (campaign, command, verdict, detectors, incidents, ...).
ControlAssessment AssessControl(const Control& control,
                                const std::vector<nlohmann::json>& campaigns);

// Whether `detector` of a `command` campaign is evidence for `control`.
bool ControlCovers(const Control& control, const std::string& command,
                   const std::string& detector);

// Answer sheets per control with an id: "answers/<oscal_id>.csv" and
// "answers/<oscal_id>.md" → content. Each holds the answer, the period,
// the campaigns, detectors with coverage, open incidents and references
// into the bundle (campaign files, cited row seqs, the checkpoint).
std::map<std::string, std::string> AnswerSheets(
    const std::vector<nlohmann::json>& campaigns,
    const std::vector<Control>& controls, const ExportContext& ctx);

// One CSV field per RFC 4180 (quoted when it holds , " CR or LF), with a
// leading = + - @ TAB or CR defused by a ' so spreadsheets do not run it.
std::string CsvField(absl::string_view s);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_EVIDENCE_CONTROLS_H_
