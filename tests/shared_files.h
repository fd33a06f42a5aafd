// The files tests read from the shared folder (models, golden outputs,
// schemas), which is never copied into this repository: ../shared beside
// the checkout, or $KVCANARY_SHARED_DIR. Every test that needs one goes
// through this header, so the rule for a missing one is in one place: the
// test skips, saying which file is absent, except under CI (the CI
// environment variable set, as .ci/run does, and not "false" or "0"), where
// it fails instead, so that CI cannot pass by skipping what it exists to
// check. (GPU tests skip without a device under CI too: that is not a
// shared file.)
#ifndef KVCANARY_TESTS_SHARED_FILES_H_
#define KVCANARY_TESTS_SHARED_FILES_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>

#include "gtest/gtest.h"

namespace kvcanary::shared_files {

// $KVCANARY_SHARED_DIR where set, else ../shared beside the source tree.
inline std::string Dir() {
  const char* env = std::getenv("KVCANARY_SHARED_DIR");
  return env != nullptr && *env != '\0' ? env : KVCANARY_SHARED_DIR;
}

// `relative` (e.g. "models/stories260K.bin") under Dir().
inline std::string Path(std::string_view relative) {
  return Dir() + "/" + std::string(relative);
}

// True under CI: a missing shared file is then a failure, not a skip.
inline bool Required() {
  const char* ci = std::getenv("CI");
  if (ci == nullptr) return false;
  const std::string v(ci);
  return !v.empty() && v != "0" && v != "false" && v != "False" && v != "FALSE";
}

// "" when every file (relative to Dir()) is readable; otherwise a sentence
// naming the first that is not.
inline std::string Missing(std::initializer_list<std::string_view> relative) {
  for (std::string_view r : relative) {
    const std::string path = Path(r);
    if (access(path.c_str(), R_OK) != 0) {
      return path +
             " is absent (the shared folder: ../shared beside the checkout, "
             "or $KVCANARY_SHARED_DIR)";
    }
  }
  return "";
}

inline constexpr char kCiNote[] =
    "; CI is set, so a missing shared file fails instead of skipping";

// For a test with one part that needs shared files: true when they are all
// there. Otherwise false, after a non-fatal failure under CI, or after
// printing that `unchecked` (what that part checks) was not checked.
inline bool Have(std::initializer_list<std::string_view> relative,
                 std::string_view unchecked,
                 const char* file = __builtin_FILE(),
                 int line = __builtin_LINE()) {
  const std::string missing = Missing(relative);
  if (missing.empty()) return true;
  if (Required()) {
    ADD_FAILURE_AT(file, line)
        << missing << kCiNote << " (" << unchecked << ")";
  } else {
    std::printf("%s: %.*s not checked\n", missing.c_str(),
                static_cast<int>(unchecked.size()), unchecked.data());
  }
  return false;
}

// Whether the shell command `check` succeeds (its output discarded).
inline bool ToolWorks(const std::string& check) {
  return std::system((check + " >/dev/null 2>&1").c_str()) == 0;
}
inline constexpr char kToolMissing[] = " is not installed";
inline constexpr char kCiToolNote[] =
    "; CI is set, so that fails instead of skipping";

}  // namespace kvcanary::shared_files

// Skips the test (fails it under CI) unless every named file, relative to
// the shared folder, is readable: KVC_REQUIRE_SHARED("models/tok512.bin");
// In a test body, or in a fixture's SetUp.
#define KVC_REQUIRE_SHARED(...)                                                \
  switch (0)                                                                   \
  case 0:                                                                      \
  default:                                                                     \
    if (const std::string kvc_shared_missing =                                 \
            ::kvcanary::shared_files::Missing({__VA_ARGS__});                  \
        kvc_shared_missing.empty()) {                                          \
    } else if (::kvcanary::shared_files::Required())                           \
      GTEST_FAIL() << kvc_shared_missing << ::kvcanary::shared_files::kCiNote; \
    else                                                                       \
      GTEST_SKIP() << kvc_shared_missing

// Skips the test (fails it under CI, which installs every test package:
// scripts/install-deps.sh all) unless the shell command `check` succeeds;
// `what` names what is missing: KVC_REQUIRE_TOOL("python3 -c 'import
// jsonschema'", "python3-jsonschema");
#define KVC_REQUIRE_TOOL(check, what)                                  \
  switch (0)                                                           \
  case 0:                                                              \
  default:                                                             \
    if (::kvcanary::shared_files::ToolWorks(check)) {                  \
    } else if (::kvcanary::shared_files::Required())                   \
      GTEST_FAIL() << (what) << ::kvcanary::shared_files::kToolMissing \
                   << ::kvcanary::shared_files::kCiToolNote;           \
    else                                                               \
      GTEST_SKIP() << (what) << ::kvcanary::shared_files::kToolMissing

#endif  // KVCANARY_TESTS_SHARED_FILES_H_
