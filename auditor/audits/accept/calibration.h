// The acceptance sweep's calibration, alone (one request at a time, the
// sweeping tenant): how the target counts the filler (units linear, a base
// per prompt kind, a one-token pad word if one exists), the input limit
// (--max-prompt-tokens, advertised, or measured by the ladder), a nonce the
// model echoes in the short echo prompt (or that it never echoes), and
// whether a greedy golden answer repeats alone. A failed measurement is
// stated, never guessed around (docs/accept.md).
#ifndef KVCANARY_AUDITOR_AUDITS_ACCEPT_CALIBRATION_H_
#define KVCANARY_AUDITOR_AUDITS_ACCEPT_CALIBRATION_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "auditor/audits/accept/plan.h"
#include "auditor/campaign/calibrate.h"
#include "auditor/result/finding.h"
#include "auditor/target/limits.h"
#include "auditor/target/tenants.h"
#include "canaries/marker.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

struct AcceptCalibrationOptions {
  AuditTenant tenant;  // the sweeping tenant
  std::string secret_key;
  std::string campaign_id;
  int flag_limit = 0;      // --max-prompt-tokens; 0: advertised or measured
  TargetLimit advertised;  // what the target advertises
  int max_ladder_tokens = 16384;
  int repeats = 3;  // golden runs alone at the shortest length (at least 2)
  int nonce_candidates = 8;
};

struct AcceptCalibration {
  FillerModel filler;          // bases of the kinds that count linearly
  std::string counts_failure;  // no counts, or not linear in the units
  // Kinds whose count is not linear in the filler: their checks cannot be
  // built (a failure of the detector that needs them).
  std::map<PromptKind, std::string> kind_failures;
  std::string pad_failure;  // why no one-token pad word

  TargetLimit limit;
  std::optional<LadderResult> ladder;  // when measured
  std::string limit_failure;           // the limit is not known

  std::optional<canaries::Marker> nonce;
  int nonces_tried = 0;
  // The model writes usable text, never the nonce: echo does not apply.
  std::string echo_disabled;
  // No usable text to judge (errors, empty answers): echo is still
  // required, and this is why it is inconclusive.
  std::string echo_failure;

  bool golden_deterministic = false;
  int golden_runs = 0, golden_distinct = 0;  // at the shortest length
  std::string golden_disabled;               // answers differ alone
  std::string golden_failure;                // no usable or only empty answers

  std::vector<Finding> findings;  // the ladder met a silent truncation
  int requests = 0;

  nlohmann::json ToEvidence() const;
};

// {"start": why, ...}.
nlohmann::json KindFailuresJson(
    const std::map<PromptKind, std::string>& failures);

AcceptCalibration CalibrateAccept(const AcceptCalibrationOptions& options,
                                  const SendAlone& send);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_ACCEPT_CALIBRATION_H_
