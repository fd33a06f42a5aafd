// kvcanary-engine: generate | demo | up | serve | faults | write-model
// (README.md). Each subcommand, with the flags only it reads, is a file of
// engine/app/cli/ that registers itself (engine/app/cli/commands.h); this
// runs the one the command line names. `kvcanary-engine <subcommand>
// --help` lists a subcommand's flags; a flag that is unknown, of another
// subcommand or badly valued exits 2, a subcommand that fails exits 1.
//
// With no --model, the embedded default (a synthetic model of the
// stories260K shape, docs/model.md) and its tokenizer are used. --model
// takes a llama2.c checkpoint (with --tokenizer) or a GGUF file (its own
// tokenizer unless --tokenizer is given; docs/gguf.md).
#include "common/command.h"
#include "engine/app/cli/commands.h"

int main(int argc, char** argv) {
  using kvcanary::engine::cli::EngineCommands;
  using kvcanary::engine::cli::kProgram;
  using kvcanary::engine::cli::kSummary;
  return kvcanary::RunCommandLine(EngineCommands(), kProgram, kSummary, argc,
                                  argv);
}
