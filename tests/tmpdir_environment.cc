// Every test process writes under one private directory it removes: linked
// into each test binary, this environment creates "$TMPDIR/kvt-XXXXXX"
// before the first test, points TMPDIR at it (so ::testing::TempDir(),
// common/temp_dir.h, SQLite, and the processes a test starts all write
// there) and removes it, with everything in it, after the last test,
// whether the tests passed or failed. CTest runs every test with TMPDIR set
// to an empty directory that its final fixture checks is empty again
// (tests/CMakeLists.txt): a test that crashed, or a writer that ignores
// TMPDIR, shows up there, a directory's `.test` file naming its test. The
// name is short: programs put Unix sockets under TMPDIR (Chromium's
// SingletonSocket), whose paths hold 107 bytes.
#include <stdlib.h>

#include <fstream>
#include <string>
#include <utility>

#include "common/check.h"
#include "common/temp_dir.h"
#include "gtest/gtest.h"

namespace kvcanary {
namespace {

class TmpdirEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* before = std::getenv("TMPDIR");
    had_before_ = before != nullptr;
    if (had_before_) before_ = before;
    absl::StatusOr<TempDir> dir = TempDir::Create("kvt");
    CHECK(dir.ok()) << dir.status();
    dir_ = std::move(*dir);
    // Which test left the directory, should it be left ("Suite.Name", the
    // filter CTest runs one test with).
    std::ofstream(dir_.File(".test")) << ::testing::GTEST_FLAG(filter) << "\n";
    CHECK(::setenv("TMPDIR", dir_.path().c_str(), 1) == 0);
  }
  void TearDown() override {
    dir_.Remove();
    if (had_before_) {
      ::setenv("TMPDIR", before_.c_str(), 1);
    } else {
      ::unsetenv("TMPDIR");
    }
  }

 private:
  TempDir dir_;
  bool had_before_ = false;
  std::string before_;
};

// Registered before main(): gtest owns and deletes it.
::testing::Environment* const kTmpdirEnvironment =
    ::testing::AddGlobalTestEnvironment(new TmpdirEnvironment);

}  // namespace
}  // namespace kvcanary
