// kvcanary-engine's subcommands: one file each in engine/app/cli/, owning
// the flags only it reads (shared_flags.h and node_flags.h hold those
// several read), and registering itself here with a static
// CommandRegistration (common/command.h). engine_main.cc runs the one the
// command line names.
//
// The `order` keys, which set --help's listing: generate 10, demo 20,
// up 30, serve 40, faults 50, write-model 60.
#ifndef KVCANARY_ENGINE_APP_CLI_COMMANDS_H_
#define KVCANARY_ENGINE_APP_CLI_COMMANDS_H_

#include "common/command.h"

namespace kvcanary::engine::cli {

inline constexpr char kProgram[] = "kvcanary-engine";
inline constexpr char kSummary[] =
    "An LLM inference engine whose KV pages carry stamps that catch one "
    "tenant's request reading another's (README.md).";

// The registry every file of engine/app/cli/ adds its command to.
CommandRegistry& EngineCommands();

}  // namespace kvcanary::engine::cli

#endif  // KVCANARY_ENGINE_APP_CLI_COMMANDS_H_
