// kvcanary-auditor forensics: counts the requests in a log with a
// silent-contamination signature (docs/forensics.md).
#include "auditor/audits/forensics/forensics.h"

#include <cmath>
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "auditor/cli/commands.h"
#include "auditor/cli/shared_flags.h"
#include "auditor/reports/metrics.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, log, "", "forensics: the request log to read.");
ABSL_FLAG(std::string, mapping, "",
          "forensics: a field mapping file for another engine's log "
          "(docs/forensics.md).");
ABSL_FLAG(int, input_limit, 0,
          "forensics: the serving input limit in prompt tokens.");
ABSL_FLAG(double, ttft_floor_us_per_token, 0,
          "forensics: the first-token floor per prompt token in microseconds "
          "(0: from the latest calibration in --db, else not checked).");
ABSL_FLAG(std::string, calibration_target, "",
          "forensics: the URL of the server the log is from (as probe's "
          "--target); the first-token floor comes from the latest calibration "
          "against it in --db.");
ABSL_FLAG(double, window, 3600,
          "forensics: seconds per time window of the counts.");

namespace kvcanary::auditor::cli {
namespace {

absl::StatusOr<ForensicsOptions> ForensicsOptionsFromFlags() {
  ForensicsOptions o;
  o.log_path = absl::GetFlag(FLAGS_log);
  if (o.log_path.empty()) {
    return absl::InvalidArgumentError("--log is required");
  }
  o.format = absl::GetFlag(FLAGS_format);
  if (o.format.empty()) o.format = "kvcanary";
  o.mapping_path = absl::GetFlag(FLAGS_mapping);
  o.input_limit = absl::GetFlag(FLAGS_input_limit);
  o.ttft_floor_us_per_token = absl::GetFlag(FLAGS_ttft_floor_us_per_token);
  o.calibration_target = absl::GetFlag(FLAGS_calibration_target);
  ASSIGN_OR_RETURN(o.db_path, DbFromFlags());
  RETURN_IF_ERROR(CheckSeconds("--window", absl::GetFlag(FLAGS_window)));
  o.window = absl::Seconds(absl::GetFlag(FLAGS_window));
  o.progress = !absl::GetFlag(FLAGS_quiet);
  if (o.input_limit < 1 || !std::isfinite(o.ttft_floor_us_per_token) ||
      o.ttft_floor_us_per_token < 0) {
    return absl::InvalidArgumentError(
        "--input-limit must be >= 1 and --ttft-floor-us-per-token >= 0");
  }
  return o;
}

int RunForensicsCommand(const CliParse&) {
  absl::StatusOr<ForensicsOptions> o = ForensicsOptionsFromFlags();
  if (!o.ok()) return Fail(o.status());
  AuditorMetrics metrics;
  return Conclude(RunForensics(*o, &metrics), metrics);
}

const CommandRegistration kForensics(
    AuditorCommands(),
    {60,
     {"forensics",
      "Reads request logs and counts requests with a silent-contamination "
      "signature, per tenant and time window, as a floor.",
      WithReportFlags({"log", "format", "mapping", "input_limit",
                       "calibration_target", "ttft_floor_us_per_token",
                       "window"}),
      {}},
     RunForensicsCommand});

}  // namespace
}  // namespace kvcanary::auditor::cli
