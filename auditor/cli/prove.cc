// kvcanary-auditor prove: an inclusion or consistency proof of the
// evidence log (docs/evidence-store.md).
#include <cstdint>

#include "absl/flags/flag.h"
#include "auditor/cli/commands.h"
#include "auditor/cli/shared_flags.h"
#include "auditor/evidence/tlog_commands.h"

ABSL_FLAG(int64_t, row, 0, "prove: the row (seq) to prove included.");
ABSL_FLAG(uint64_t, tree_size, 0,
          "prove: the tree size the row is proved in (0: every row).");
ABSL_FLAG(uint64_t, from_size, 0,
          "prove: the older tree size of a consistency proof.");
ABSL_FLAG(uint64_t, to_size, 0,
          "prove: the newer tree size of a consistency proof (0: every "
          "row).");

namespace kvcanary::auditor::cli {
namespace {

int RunProve(const CliParse&) {
  ProveOptions o;
  o.db = absl::GetFlag(FLAGS_db);
  o.row = absl::GetFlag(FLAGS_row);
  o.tree_size = absl::GetFlag(FLAGS_tree_size);
  o.from_size = absl::GetFlag(FLAGS_from_size);
  o.to_size = absl::GetFlag(FLAGS_to_size);
  if (o.row < 0 || (o.row == 0) == (o.from_size == 0)) {
    return Fail(absl::InvalidArgumentError(
        "prove: --row N (inclusion) or --from-size A [--to-size B] "
        "(consistency), not both"));
  }
  return Prove(o);
}

const CommandRegistration kProve(
    AuditorCommands(),
    {120,
     {"prove",
      "Prints an inclusion proof (--row) or a consistency proof "
      "(--from-size, --to-size) of the evidence log.",
      {"db", "row", "tree_size", "from_size", "to_size"},
      {}},
     RunProve});

}  // namespace
}  // namespace kvcanary::auditor::cli
