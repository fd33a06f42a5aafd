// kvcanary-engine faults: the fault switches --fault turns on
// (engine/core/faults.h, docs/faults.md).
#include "engine/core/faults.h"

#include <cstdio>

#include "engine/app/cli/commands.h"

namespace kvcanary::engine::cli {
namespace {

int ListFaults(const CliParse&) {
  for (const auto& f : AllFaults()) {
    std::printf("%-24s %s\n", f.name, f.description);
  }
  return 0;
}

const CommandRegistration kFaults(
    EngineCommands(),
    {50,
     {"faults", "Lists the fault switches --fault turns on.", {}, {}},
     ListFaults});

}  // namespace
}  // namespace kvcanary::engine::cli
