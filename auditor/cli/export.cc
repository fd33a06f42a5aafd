// kvcanary-auditor export: a signed, self-contained bundle of the campaigns
// of a window (docs/bundles.md).
#include "auditor/evidence/export.h"

#include <string>

#include "absl/flags/flag.h"
#include "auditor/cli/commands.h"
#include "auditor/cli/shared_flags.h"
#include "auditor/evidence/bundle_format.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, since, "",
          "export: campaigns started at or after this time (RFC 3339, e.g. "
          "2026-11-01T00:00:00Z).");
ABSL_FLAG(std::string, until, "",
          "export: campaigns started at or before this time (RFC 3339; "
          "default: now).");
ABSL_FLAG(std::string, controls, "",
          "export: the control map (docs/controls.md; default: the one built "
          "in, docs/controls.json).");

namespace kvcanary::auditor::cli {
namespace {

absl::StatusOr<ExportOptions> ExportOptionsFromFlags() {
  ExportOptions o;
  o.db = absl::GetFlag(FLAGS_db);
  o.key = absl::GetFlag(FLAGS_key);
  o.origin = absl::GetFlag(FLAGS_origin);
  o.out_dir = absl::GetFlag(FLAGS_out);
  if (o.db.empty() || o.key.empty() || o.out_dir.empty() ||
      absl::GetFlag(FLAGS_since).empty()) {
    return absl::InvalidArgumentError(
        "export needs --db, --since, --key and --out");
  }
  ASSIGN_OR_RETURN(o.since_us, ParseRfc3339Us(absl::GetFlag(FLAGS_since)));
  if (const std::string until = absl::GetFlag(FLAGS_until); !until.empty()) {
    ASSIGN_OR_RETURN(o.until_us, ParseRfc3339Us(until));
  }
  return o;
}

int RunExport(const CliParse&) {
  absl::StatusOr<ExportOptions> o = ExportOptionsFromFlags();
  if (!o.ok()) return Fail(o.status());
  return ExportCommand(*o, absl::GetFlag(FLAGS_controls));
}

const CommandRegistration kExport(
    AuditorCommands(),
    {100,
     {"export",
      "Writes a signed, self-contained bundle of the campaigns started in a "
      "window: their verdicts, coverage, incidents and rows with inclusion "
      "proofs, OSCAL assessment results and questionnaire answers.",
      {"db", "since", "until", "key", "origin", "out", "controls"},
      {}},
     RunExport});

}  // namespace
}  // namespace kvcanary::auditor::cli
