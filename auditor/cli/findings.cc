// kvcanary-auditor findings: the incidents (or finding rows) recorded in
// the evidence database.
#include <string>

#include "absl/flags/flag.h"
#include "auditor/cli/commands.h"
#include "auditor/cli/shared_flags.h"
#include "auditor/evidence/commands.h"

ABSL_FLAG(std::string, campaign, "",
          "Only this campaign (default: every campaign in the database).");
ABSL_FLAG(bool, rows, false,
          "findings: the raw finding rows instead of incidents.");

namespace kvcanary::auditor::cli {
namespace {

int RunFindings(const CliParse&) {
  FindingsOptions o;
  o.db = absl::GetFlag(FLAGS_db);
  o.campaign = absl::GetFlag(FLAGS_campaign);
  o.format = absl::GetFlag(FLAGS_format);
  if (o.format.empty()) o.format = "table";
  o.rows = absl::GetFlag(FLAGS_rows);
  o.max_lines = absl::GetFlag(FLAGS_max_incident_lines);
  return FindingsCommand(o);
}

const CommandRegistration kFindings(
    AuditorCommands(),
    {130,
     {"findings",
      "Lists the incidents (or, with --rows, the finding rows) recorded in "
      "the evidence database.",
      {"db", "campaign", "format", "rows", "max_incident_lines"},
      {}},
     RunFindings});

}  // namespace
}  // namespace kvcanary::auditor::cli
