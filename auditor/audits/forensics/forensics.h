// `kvcanary-auditor forensics`: were we already exposed? Reads request
// logs (kvcanary's router access log, or another engine's through a field
// mapping file) and flags requests whose shape matches a silent
// contamination signature: prompt_tokens above the serving input limit yet
// status 200; a first token faster than the calibrated floor for the
// prompt's length; a completion returned while a node logged an abort or a
// transfer failure for that request. Counts per tenant and time window are
// stated as a floor, with the method beside each number.
#ifndef KVCANARY_AUDITOR_AUDITS_FORENSICS_FORENSICS_H_
#define KVCANARY_AUDITOR_AUDITS_FORENSICS_FORENSICS_H_

#include <string>

#include "absl/time/time.h"
#include "auditor/reports/metrics.h"
#include "auditor/result/result.h"

namespace kvcanary::auditor {

struct ForensicsOptions {
  // The log; its rotated files `log_path`.N that exist are read too, the
  // oldest (highest N) first, `log_path` itself last.
  std::string log_path;
  // kvcanary, or a mapping's format name; "" or "kvcanary" with a mapping
  // file: the file's only format.
  std::string format = "kvcanary";
  std::string mapping_path;  // a field mapping file (another engine)
  int input_limit = 0;       // the serving input limit, tokens
  // The first-token floor per prompt token, µs; 0: from the latest latency
  // calibration recorded in the evidence store (`db_path`) against
  // `calibration_target`, else (or without a target) unused.
  double ttft_floor_us_per_token = 0;
  std::string calibration_target;  // the URL the calibration measured
  std::string db_path;
  absl::Duration window = absl::Hours(1);  // counts per tenant per window
  bool progress = true;
};

CampaignResult RunForensics(const ForensicsOptions& options,
                            AuditorMetrics* metrics);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_FORENSICS_FORENSICS_H_
