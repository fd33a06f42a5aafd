// The auditor sees any engine only from outside (ARCHITECTURE.md): no file
// of auditor/, canaries/ or storage/ may include an engine or kernels
// header. auditor/CMakeLists.txt checks the matching rule on link targets.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvcanary {
namespace {

namespace fs = std::filesystem;

// Lines of `text` that include an engine/ or kernels/ header, quoted or
// angled, with any spacing around '#'.
std::vector<std::string> ForbiddenIncludes(const std::string& text) {
  static const std::regex kForbidden(
      R"(^\s*#\s*include\s*["<](engine|kernels)/)");
  std::vector<std::string> hits;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (std::regex_search(line, kForbidden)) hits.push_back(line);
  }
  return hits;
}

// This file is tests/auditor/layering_test.cc; the repository root is two
// levels up. CMake passes absolute source paths, so __FILE__ is absolute.
fs::path RepoRoot() {
  return fs::path(__FILE__).parent_path().parent_path().parent_path();
}

TEST(LayeringTest, DetectorFindsForbiddenIncludes) {
  EXPECT_THAT(ForbiddenIncludes("#include \"engine/page_pool.h\"\n"),
              ::testing::SizeIs(1));
  EXPECT_THAT(ForbiddenIncludes("  #  include <kernels/paged_attention.h>"),
              ::testing::SizeIs(1));
  EXPECT_THAT(ForbiddenIncludes("#include \"common/page_stamp.h\"\n"
                                "// the engine/ folder is off limits\n"
                                "#include \"auditor/engine/x.h\"\n"),
              ::testing::IsEmpty());
}

TEST(LayeringTest, AuditorCanariesAndStorageNeverIncludeEngineOrKernels) {
  const fs::path root = RepoRoot();
  ASSERT_TRUE(fs::is_directory(root / "auditor"))
      << "cannot find the repository root from __FILE__ = " << __FILE__;
  int files_read = 0;
  for (const char* dir : {"auditor", "canaries", "storage"}) {
    ASSERT_TRUE(fs::is_directory(root / dir)) << root / dir;
    for (const fs::directory_entry& entry :
         fs::recursive_directory_iterator(root / dir)) {
      if (!entry.is_regular_file()) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      ASSERT_TRUE(in.good()) << "cannot read " << entry.path();
      std::ostringstream text;
      text << in.rdbuf();
      ++files_read;
      for (const std::string& line : ForbiddenIncludes(text.str())) {
        ADD_FAILURE() << entry.path().string()
                      << " includes an engine/kernels header: " << line;
      }
    }
  }
  EXPECT_GT(files_read, 3);  // the walk really saw the sources
}

// auditor/cli/ (the subcommands and their flags) is the binary's, not the
// library's: only it and auditor_main.cc include it.
TEST(LayeringTest, OnlyTheBinaryIncludesTheCommandLine) {
  const fs::path root = RepoRoot();
  const std::regex cli_include(R"(^\s*#\s*include\s*["<]auditor/cli/)");
  int files_read = 0;
  for (const fs::directory_entry& entry :
       fs::recursive_directory_iterator(root / "auditor")) {
    const fs::path relative = fs::relative(entry.path(), root / "auditor");
    if (!entry.is_regular_file() || *relative.begin() == "cli" ||
        relative == "auditor_main.cc") {
      continue;
    }
    std::ifstream in(entry.path(), std::ios::binary);
    std::string line;
    ++files_read;
    while (std::getline(in, line)) {
      EXPECT_FALSE(std::regex_search(line, cli_include))
          << entry.path().string() << " includes the command line: " << line;
    }
  }
  EXPECT_GT(files_read, 3);
}

}  // namespace
}  // namespace kvcanary
