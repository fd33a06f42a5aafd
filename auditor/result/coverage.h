// Verdicts with coverage: what each detector checked, per tenant, against a
// stated floor, and the one verdict a campaign ends in. A campaign may say
// `clean` only when every detector it was asked to run reached its floor
// for every tenant; a check that could not be made (a failed calibration,
// a trace with nothing sampled, dropped trace events, a refused key) makes
// the result inconclusive, never clean. docs/auditor.md states the rules.
#ifndef KVCANARY_AUDITOR_RESULT_COVERAGE_H_
#define KVCANARY_AUDITOR_RESULT_COVERAGE_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// Exit codes: the verdict's value.
enum class Verdict { kClean = 0, kFindings = 1, kError = 2, kInconclusive = 3 };
const char* VerdictName(Verdict v);  // clean, findings, error, inconclusive

inline constexpr int kDefaultFloor = 20;

enum class DetectorState { kActive, kInconclusive, kDisabled };
const char* DetectorStateName(DetectorState s);  // active, inconclusive, ...

// One detector's coverage in one campaign.
struct DetectorCoverage {
  std::string name;
  bool required = true;
  // Set when the detector does not apply (no --trace; a model that never
  // echoes alone), with why. A required detector that is disabled is
  // inconclusive.
  std::string disabled;
  // Set when a check the detector depends on failed (a calibration, a
  // positive control, dropped trace events): inconclusive whatever the
  // counts. Several failures are joined with "; ".
  std::string failure;
  int floor = kDefaultFloor;            // per tenant
  std::string unit;                     // what `coverage` counts
  std::map<std::string, int> coverage;  // tenant -> count
  std::vector<std::string> notes;       // e.g. golden's rate mode
  int findings = 0;                     // raw finding rows
  nlohmann::json stats = nlohmann::json::object();

  // Derived by Judge().
  DetectorState state = DetectorState::kInconclusive;
  std::string reason;  // "" when active

  void AddFailure(absl::string_view why);
  // Sets state and reason from `disabled`, `failure` and, for every tenant
  // in `tenants`, its count against the floor (a tenant missing from
  // `coverage` counts 0).
  void Judge(const std::vector<std::string>& tenants);
  // "acme 31, globex 33": per tenant, worst first.
  std::string CoverageText() const;
  // As in the campaign-result document's `detectors` (docs/reports.md).
  nlohmann::json ToJson() const;
};

// The floor of `detector`: its own entry in `floors`, else the "" default,
// else kDefaultFloor.
int FloorOf(const std::map<std::string, int>& floors,
            const std::string& detector);

struct VerdictDecision {
  Verdict verdict = Verdict::kError;
  // Why the verdict is not clean: the finding count, and each required
  // detector below its floor and each problem of a tenant; for `error`,
  // the error itself.
  std::vector<std::string> reasons;
  // What stopped the command before its end, beside any verdict (the
  // result's `error`); "" when it ran to its end.
  std::string error;
};

// The one rule every command's verdict follows: findings > error >
// inconclusive > clean.
//   1. error if `run` failed before the audit started (`audit_started`
//      false: its flags, evidence store or target — the model, every
//      tenant's key — failed the start checks, so nothing was probed);
//   2. else findings if there is any, even when `run` failed later (the
//      target died, the disk filled): a proven finding is not hidden by
//      what came after it, and the error is given beside it;
//   3. else error if `run` failed;
//   4. else inconclusive if any required detector is not active or
//      `problems` (e.g. a tenant whose probes were refused mid-run) is not
//      empty;
//   5. else clean.
// REQUIRES: detectors judged.
VerdictDecision DecideVerdict(const absl::Status& run, bool audit_started,
                              size_t findings,
                              const std::vector<DetectorCoverage>& detectors,
                              const std::vector<std::string>& problems);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_RESULT_COVERAGE_H_
