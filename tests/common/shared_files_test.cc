// tests/shared_files.h, the one rule for tests that read ../shared: a
// missing file skips the test, and fails it under CI; files that are there
// let it run.
#include "tests/shared_files.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"

namespace kvcanary::shared_files {
namespace {

// Sets (or with nullopt unsets) an environment variable for its scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Runs each test against a shared folder of its own holding
// models/present.bin only, removed after.
class SharedFilesTest : public ::testing::Test {
 protected:
  SharedFilesTest()
      : dir_(::testing::TempDir() + "/shared_files_test_" +
             std::to_string(getpid())),
        env_("KVCANARY_SHARED_DIR", dir_) {
    std::filesystem::create_directories(dir_ + "/models");
    std::ofstream(dir_ + "/models/present.bin") << "weights";
  }
  ~SharedFilesTest() override { std::filesystem::remove_all(dir_); }

 private:
  const std::string dir_;
  ScopedEnv env_;
};

bool body_ran = false;

void NeedsAbsentFile() {
  KVC_REQUIRE_SHARED("models/present.bin", "models/absent.bin");
  body_ran = true;
}

void NeedsPresentFile() {
  KVC_REQUIRE_SHARED("models/present.bin");
  body_ran = true;
}

// The results `fn` reports, intercepted so that they do not count here.
std::vector<::testing::TestPartResult> Results(void (*fn)()) {
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::
            INTERCEPT_ONLY_CURRENT_THREAD,
        &results);
    body_ran = false;
    fn();
  }
  std::vector<::testing::TestPartResult> out;
  for (int i = 0; i < results.size(); ++i) {
    out.push_back(results.GetTestPartResult(i));
  }
  return out;
}

TEST_F(SharedFilesTest, AMissingFileSkipsTheTestOutsideCi) {
  ScopedEnv ci("CI", std::nullopt);
  const std::vector<::testing::TestPartResult> r = Results(NeedsAbsentFile);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].skipped());
  EXPECT_NE(std::string(r[0].message()).find("absent.bin"), std::string::npos);
  EXPECT_FALSE(body_ran);
}

TEST_F(SharedFilesTest, AMissingFileFailsTheTestUnderCi) {
  for (const char* value : {"true", "1", "yes"}) {
    ScopedEnv ci("CI", value);
    const std::vector<::testing::TestPartResult> r = Results(NeedsAbsentFile);
    ASSERT_EQ(r.size(), 1u) << value;
    EXPECT_TRUE(r[0].fatally_failed()) << value;
    EXPECT_NE(std::string(r[0].message()).find("CI is set"), std::string::npos);
    EXPECT_FALSE(body_ran);
  }
}

TEST_F(SharedFilesTest, CiSetToFalseOrEmptyIsNotCi) {
  for (const char* value : {"false", "0", ""}) {
    ScopedEnv ci("CI", value);
    const std::vector<::testing::TestPartResult> r = Results(NeedsAbsentFile);
    ASSERT_EQ(r.size(), 1u) << value;
    EXPECT_TRUE(r[0].skipped()) << "CI=" << value;
  }
}

TEST_F(SharedFilesTest, PresentFilesLetTheTestRunUnderCiToo) {
  ScopedEnv ci("CI", "true");
  const std::vector<::testing::TestPartResult> r = Results(NeedsPresentFile);
  EXPECT_TRUE(r.empty());
  EXPECT_TRUE(body_ran);
}

TEST_F(SharedFilesTest, HaveIsFalseForAPartAndFailsItOnlyUnderCi) {
  {
    ScopedEnv ci("CI", std::nullopt);
    EXPECT_TRUE(Have({"models/present.bin"}, "the present part"));
    EXPECT_FALSE(Have({"models/absent.bin"}, "the absent part"));
  }
  ScopedEnv ci("CI", "true");
  EXPECT_NONFATAL_FAILURE(Have({"models/absent.bin"}, "the absent part"),
                          "models/absent.bin is absent");
}

TEST(SharedFilesDirTest, DefaultsToTheFolderBesideTheCheckout) {
  ScopedEnv dir("KVCANARY_SHARED_DIR", std::nullopt);
  EXPECT_EQ(Dir(), KVCANARY_SHARED_DIR);
  EXPECT_EQ(Path("models/tok512.bin"),
            std::string(KVCANARY_SHARED_DIR) + "/models/tok512.bin");
}

}  // namespace
}  // namespace kvcanary::shared_files
