// kvcanary-engine demo: the whole story, in this process and then across
// processes (engine/app/demo.h, engine/app/incident_demo.h).
#include "engine/app/demo.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/app/cli/commands.h"
#include "engine/app/cli/shared_flags.h"
#include "engine/app/incident_demo.h"

namespace kvcanary::engine::cli {
namespace {

absl::Status Demo() {
  ASSIGN_OR_RETURN(LoadedModel loaded, LoadModelFromFlags());
  DemoOptions options;
  options.num_threads = absl::GetFlag(FLAGS_threads);
  RETURN_IF_ERROR(RunDemo(loaded.model, loaded.tokenizer, options, stdout));
  std::vector<std::string> model_args;
  if (!absl::GetFlag(FLAGS_model).empty()) {
    model_args.push_back("--model=" + absl::GetFlag(FLAGS_model));
  }
  if (!absl::GetFlag(FLAGS_tokenizer).empty()) {
    model_args.push_back("--tokenizer=" + absl::GetFlag(FLAGS_tokenizer));
  }
  if (absl::GetFlag(FLAGS_context) != 0) {
    model_args.push_back(
        absl::StrCat("--context=", absl::GetFlag(FLAGS_context)));
  }
  return RunIncidentDemo(model_args, stdout);
}

const CommandRegistration kDemo(
    EngineCommands(),
    {20,
     {"demo",
      "The whole story: a multi-tenant workload with a planted foreign write "
      "caught, then the incident reproduced across router, prefill and "
      "decode processes.",
      {"model", "tokenizer", "context", "threads"},
      {}},
     [](const CliParse&) { return ExitCode("demo", Demo()); }});

}  // namespace
}  // namespace kvcanary::engine::cli
