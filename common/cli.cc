#include "common/cli.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/check.h"

namespace kvcanary {
namespace {

constexpr size_t kWidth = 80;      // help lines wrap here
constexpr size_t kMaxColumn = 32;  // where flag help starts, at most

bool IsHelpWord(absl::string_view arg) {
  return arg == "--help" || arg == "-help" || arg == "-h" ||
         arg == "--helpfull" || arg == "-helpfull";
}

// "--max-probes=3" is a flag; "-", "" and "foo" are not.
bool LooksLikeFlag(absl::string_view arg) {
  return arg.size() > 1 && arg[0] == '-';
}

std::string Underscores(absl::string_view name) {
  return absl::StrReplaceAll(name, {{"-", "_"}});
}

std::string Dashes(absl::string_view name) {
  return absl::StrReplaceAll(name, {{"_", "-"}});
}

// "--max-probes=3" -> "max-probes"; "-h" -> "h".
absl::string_view FlagWord(absl::string_view arg) {
  arg.remove_prefix(arg.size() > 1 && arg[1] == '-' ? 2 : 1);
  return arg.substr(0, arg.find('='));
}

const Subcommand* FindSubcommand(const CliSpec& spec, absl::string_view name) {
  for (const Subcommand& s : spec.subcommands) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

bool HasFlag(const Subcommand& sub, absl::string_view name) {
  return std::find(sub.flags.begin(), sub.flags.end(), name) !=
             sub.flags.end() ||
         std::find(sub.hidden_flags.begin(), sub.hidden_flags.end(), name) !=
             sub.hidden_flags.end();
}

absl::CommandLineFlag& FlagOrDie(absl::string_view name) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  CHECK(flag != nullptr) << "CliSpec names --" << name
                         << ", which no ABSL_FLAG linked in declares";
  return *flag;
}

// What a value of the flag's type looks like, for error messages; empty for
// types whose own parser explains better.
std::string WantedValue(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<bool>()) return "true or false";
  if (flag.IsOfType<int32_t>()) return "a 32-bit integer";
  if (flag.IsOfType<int64_t>()) return "a 64-bit integer";
  if (flag.IsOfType<uint32_t>()) return "a non-negative 32-bit integer";
  if (flag.IsOfType<uint64_t>()) return "a non-negative 64-bit integer";
  if (flag.IsOfType<double>() || flag.IsOfType<float>()) return "a number";
  return "";
}

std::string SeeHelp(const CliSpec& spec, const Subcommand* sub) {
  return sub == nullptr
             ? absl::StrCat("see ", spec.program, " --help")
             : absl::StrCat("see ", spec.program, " ", sub->name, " --help");
}

absl::Status UnknownFlag(const CliSpec& spec, const Subcommand& sub,
                         absl::string_view arg) {
  const std::string typed(arg.substr(0, arg.find('=')));
  const std::string name = Underscores(FlagWord(arg));
  std::vector<std::string> owners;
  for (const Subcommand& s : spec.subcommands) {
    if (HasFlag(s, name)) owners.push_back(s.name);
  }
  if (owners.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown flag ", typed,
                                                   " for '", sub.name, "' (",
                                                   SeeHelp(spec, &sub), ")"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      typed, " does not apply to '", sub.name, "' (it is a flag of ",
      absl::StrJoin(owners, ", "), "; ", SeeHelp(spec, &sub), ")"));
}

// Parses the flag word at argv[*i] (advancing *i past a separate value) into
// its flag.
absl::Status ParseFlag(const CliSpec& spec, const Subcommand& sub, int argc,
                       const char* const* argv, int* i) {
  const absl::string_view arg = argv[*i];
  const absl::string_view typed = arg.substr(0, arg.find('='));
  const std::string name = Underscores(FlagWord(arg));
  const bool has_value = arg.find('=') != absl::string_view::npos;
  std::string value(has_value ? arg.substr(arg.find('=') + 1) : "");

  absl::CommandLineFlag* flag = nullptr;
  if (HasFlag(sub, name)) {
    flag = &FlagOrDie(name);
    if (flag->IsOfType<bool>() && !has_value) value = "true";
  } else if (name.rfind("no", 0) == 0 && HasFlag(sub, name.substr(2))) {
    flag = &FlagOrDie(name.substr(2));
    if (!flag->IsOfType<bool>()) {
      return absl::InvalidArgumentError(
          absl::StrCat(typed, ": --", Dashes(flag->Name()),
                       " is not a boolean flag (", SeeHelp(spec, &sub), ")"));
    }
    if (has_value) {
      return absl::InvalidArgumentError(
          absl::StrCat(typed, " takes no value; write --", Dashes(flag->Name()),
                       "=", value, " instead"));
    }
    value = "false";
  } else {
    return UnknownFlag(spec, sub, arg);
  }

  if (!flag->IsOfType<bool>() && !has_value) {
    // "--name value": the next word, unless it is missing or is itself one
    // of this subcommand's flags (a forgotten value).
    if (*i + 1 >= argc) {
      return absl::InvalidArgumentError(absl::StrCat(
          "missing value for ", typed, " (", SeeHelp(spec, &sub), ")"));
    }
    const absl::string_view next = argv[*i + 1];
    if (next == "--" ||
        (LooksLikeFlag(next) && HasFlag(sub, Underscores(FlagWord(next))))) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing value for ", typed, " before ", next,
                       " (write ", typed, "=", next, " if that is the value)"));
    }
    value = std::string(next);
    ++*i;
  }

  std::string error;
  if (!flag->ParseFrom(value, &error)) {
    const std::string wanted = WantedValue(*flag);
    return absl::InvalidArgumentError(
        absl::StrCat("bad value for ", typed, ": '", value,
                     "': ", wanted.empty() ? error : "want " + wanted));
  }
  return absl::OkStatus();
}

// The default as it is typed on a command line: "" for empty, quoted if it
// has spaces.
std::string ShownDefault(const absl::CommandLineFlag& flag) {
  const std::string d = flag.DefaultValue();
  if (d.empty() || d.find(' ') != std::string::npos) {
    return absl::StrCat("\"", d, "\"");
  }
  return d;
}

// Appends `text` word-wrapped to kWidth columns, the first line starting at
// column `first`, every line indented to `indent`.
void AppendWrapped(absl::string_view text, size_t first, size_t indent,
                   std::string* out) {
  size_t column = first;
  bool line_empty = true;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line_empty && column + 1 + word.size() > kWidth) {
      absl::StrAppend(out, "\n", std::string(indent, ' '));
      column = indent;
      line_empty = true;
    }
    if (!line_empty) {
      out->push_back(' ');
      ++column;
    }
    absl::StrAppend(out, word);
    column += word.size();
    line_empty = false;
  }
  out->push_back('\n');
}

// "  name" padded to `column`, then the wrapped text; a name too long for the
// column gets its own line.
void AppendEntry(absl::string_view name, absl::string_view text, size_t column,
                 std::string* out) {
  const std::string left = absl::StrCat("  ", name);
  if (left.size() + 2 <= column) {
    absl::StrAppend(out, left, std::string(column - left.size(), ' '));
  } else {
    absl::StrAppend(out, left, "\n", std::string(column, ' '));
  }
  AppendWrapped(text, column, column, out);
}

size_t ColumnFor(const std::vector<std::string>& names) {
  size_t widest = 0;
  for (const std::string& n : names) widest = std::max(widest, n.size());
  return std::min(widest + 4, kMaxColumn);  // "  " before, "  " after
}

std::string ProgramHelp(const CliSpec& spec) {
  std::string out =
      absl::StrCat("usage: ", spec.program, " <subcommand> [flags]\n\n");
  AppendWrapped(spec.summary, 0, 0, &out);
  out += "\nsubcommands:\n";
  std::vector<std::string> names;
  for (const Subcommand& s : spec.subcommands) names.push_back(s.name);
  const size_t column = ColumnFor(names);
  for (const Subcommand& s : spec.subcommands) {
    AppendEntry(s.name, s.summary, column, &out);
  }
  absl::StrAppend(&out, "\nRun ", spec.program,
                  " <subcommand> --help for its flags.\n");
  return out;
}

std::string SubcommandHelp(const CliSpec& spec, const Subcommand& sub) {
  std::string out = absl::StrCat("usage: ", spec.program, " ", sub.name);
  if (!sub.flags.empty()) out += " [flags]";
  for (const std::string& a : sub.args) absl::StrAppend(&out, " <", a, ">");
  out += "\n\n";
  AppendWrapped(sub.summary, 0, 0, &out);
  if (sub.flags.empty()) return out;
  out += "\nflags:\n";
  std::vector<std::string> names;
  for (const std::string& f : sub.flags) {
    names.push_back(
        absl::StrCat("--", Dashes(f), "=", ShownDefault(FlagOrDie(f))));
  }
  const size_t column = ColumnFor(names);
  for (size_t k = 0; k < names.size(); ++k) {
    AppendEntry(names[k], FlagOrDie(sub.flags[k]).Help(), column, &out);
  }
  return out;
}

}  // namespace

absl::StatusOr<CliParse> ParseCli(const CliSpec& spec, int argc,
                                  const char* const* argv) {
  for (const Subcommand& s : spec.subcommands) {
    for (const std::string& f : s.flags) FlagOrDie(f);
    for (const std::string& f : s.hidden_flags) FlagOrDie(f);
  }
  const absl::string_view first = argc > 1 ? argv[1] : "";
  const Subcommand* sub = FindSubcommand(spec, first);
  CliParse parse;
  for (int i = 1; i < argc && absl::string_view(argv[i]) != "--"; ++i) {
    if (!IsHelpWord(argv[i])) continue;
    // "up --help" and "--help up" both mean up's help.
    if (sub == nullptr && IsHelpWord(first) && argc > 2) {
      sub = FindSubcommand(spec, argv[2]);
    }
    parse.help = true;
    if (sub != nullptr) parse.subcommand = sub->name;
    return parse;
  }
  if (argc < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("no subcommand given (", SeeHelp(spec, nullptr), ")"));
  }
  if (LooksLikeFlag(first)) {
    return absl::InvalidArgumentError(absl::StrCat(
        first.substr(0, first.find('=')),
        " comes before the subcommand; flags go after it: ", spec.program,
        " <subcommand> ", first, " (", SeeHelp(spec, nullptr), ")"));
  }
  if (sub == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown subcommand '", first, "' (", SeeHelp(spec, nullptr), ")"));
  }
  parse.subcommand = sub->name;
  bool flags_done = false;
  for (int i = 2; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (!flags_done && arg == "--") {
      flags_done = true;
    } else if (!flags_done && LooksLikeFlag(arg)) {
      if (absl::Status s = ParseFlag(spec, *sub, argc, argv, &i); !s.ok()) {
        return s;
      }
    } else if (parse.positional.size() < sub->args.size()) {
      parse.positional.emplace_back(arg);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' for '", sub->name,
                       "' (", SeeHelp(spec, sub), ")"));
    }
  }
  return parse;
}

std::string CliHelp(const CliSpec& spec, absl::string_view subcommand) {
  if (subcommand.empty()) return ProgramHelp(spec);
  const Subcommand* sub = FindSubcommand(spec, subcommand);
  CHECK(sub != nullptr) << "CliHelp: no subcommand '" << subcommand << "'";
  return SubcommandHelp(spec, *sub);
}

}  // namespace kvcanary
