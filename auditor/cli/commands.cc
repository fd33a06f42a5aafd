#include "auditor/cli/commands.h"

namespace kvcanary::auditor::cli {

CommandRegistry& AuditorCommands() {
  static auto* registry = new CommandRegistry;  // never destroyed
  return *registry;
}

}  // namespace kvcanary::auditor::cli
