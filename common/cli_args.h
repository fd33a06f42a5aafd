// Command-line arguments for the binaries' absl flags: "--max-tokens" is
// accepted as well as "--max_tokens".
#ifndef KVCANARY_COMMON_CLI_ARGS_H_
#define KVCANARY_COMMON_CLI_ARGS_H_

#include <algorithm>
#include <string>
#include <vector>

namespace kvcanary {

// argv with the dashes inside every "--flag-name" (before any '=') turned
// into underscores; values and positional arguments are left as they are.
// Keep the result alive while pointers into it (ArgvOf) are used.
inline std::vector<std::string> UnderscoreFlagNames(int argc, char** argv) {
  std::vector<std::string> out(argv, argv + argc);
  for (std::string& a : out) {
    if (a.rfind("--", 0) != 0) continue;
    const size_t end = std::min(a.find('='), a.size());
    for (size_t i = 2; i < end; ++i) {
      if (a[i] == '-') a[i] = '_';
    }
  }
  return out;
}

// char* views of `args`, for absl::ParseCommandLine.
inline std::vector<char*> ArgvOf(std::vector<std::string>& args) {
  std::vector<char*> out;
  for (std::string& a : args) out.push_back(a.data());
  return out;
}

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_CLI_ARGS_H_
