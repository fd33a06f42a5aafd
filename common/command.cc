#include "common/command.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/check.h"

namespace kvcanary {

void CommandRegistry::Add(Command command) {
  CHECK(!command.cli.name.empty()) << "a command needs a name";
  CHECK(command.run) << "command '" << command.cli.name << "' has no run";
  for (const Command& c : commands_) {
    CHECK(c.cli.name != command.cli.name)
        << "command '" << c.cli.name << "' registered twice";
    CHECK(c.order != command.order)
        << "commands '" << c.cli.name << "' and '" << command.cli.name
        << "' share order " << c.order;
  }
  const auto at = std::upper_bound(
      commands_.begin(), commands_.end(), command.order,
      [](int order, const Command& c) { return order < c.order; });
  commands_.insert(at, std::move(command));
}

const Command* CommandRegistry::Find(absl::string_view name) const {
  for (const Command& c : commands_) {
    if (c.cli.name == name) return &c;
  }
  return nullptr;
}

CliSpec CommandRegistry::Spec(absl::string_view program,
                              absl::string_view summary) const {
  CliSpec spec;
  spec.program = std::string(program);
  spec.summary = std::string(summary);
  for (const Command& c : commands_) spec.subcommands.push_back(c.cli);
  return spec;
}

int RunCommandLine(const CommandRegistry& registry, absl::string_view program,
                   absl::string_view summary, int argc, const char* const* argv,
                   FILE* out, FILE* err) {
  const CliSpec spec = registry.Spec(program, summary);
  if (argc < 2) {
    std::fputs(CliHelp(spec, "").c_str(), err);
    return 2;
  }
  absl::StatusOr<CliParse> parse = ParseCli(spec, argc, argv);
  if (!parse.ok()) {
    std::fprintf(err, "%s: %s\n", spec.program.c_str(),
                 std::string(parse.status().message()).c_str());
    return 2;
  }
  if (parse->help) {
    std::fputs(CliHelp(spec, parse->subcommand).c_str(), out);
    return 0;
  }
  const Command* command = registry.Find(parse->subcommand);
  CHECK(command != nullptr);  // ParseCli admits only the spec's commands
  return command->run(*parse);
}

}  // namespace kvcanary
