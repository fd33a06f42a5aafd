#include "engine/app/cli/commands.h"

namespace kvcanary::engine::cli {

CommandRegistry& EngineCommands() {
  static auto* registry = new CommandRegistry;  // never destroyed
  return *registry;
}

}  // namespace kvcanary::engine::cli
