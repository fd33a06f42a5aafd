// The auditor sees any engine only from outside (ARCHITECTURE.md): no file
// of auditor/, canaries/ or storage/ may include an engine or kernels
// header. auditor/CMakeLists.txt checks the matching rule on link targets.
//
// Inside auditor/, one folder per job (docs/architecture.md, "The
// auditor's folders"): every source but the binary's main lives in a
// sub-folder, the folders' includes form no cycle, detectors never include
// a command (campaign/, audits/, cli/), reports never include the campaign
// or a command, and no library folder includes cli/.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
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

// The repository root, as CMake gives it to the tests.
fs::path RepoRoot() { return fs::path(KVCANARY_SOURCE_DIR); }

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
      << "cannot find the repository root: " << KVCANARY_SOURCE_DIR;
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

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// auditor/<folder>/... -> the auditor folders its quoted includes name,
// other than its own, with the first including file for each.
using FolderGraph = std::map<std::string, std::map<std::string, std::string>>;

FolderGraph AuditorFolderGraph(const fs::path& auditor) {
  static const std::regex kInclude(
      R"re(^\s*#\s*include\s*"auditor/([a-z_]+)/)re");
  FolderGraph g;
  for (const fs::directory_entry& e :
       fs::recursive_directory_iterator(auditor)) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = fs::relative(e.path(), auditor);
    if (std::distance(rel.begin(), rel.end()) < 2) continue;  // the main
    const std::string from = rel.begin()->string();
    g[from];
    std::istringstream lines(ReadText(e.path()));
    std::string line;
    std::smatch m;
    while (std::getline(lines, line)) {
      if (std::regex_search(line, m, kInclude) && m[1] != from) {
        g[from].emplace(m[1], rel.string());
      }
    }
  }
  return g;
}

// A cycle of folders as "a -> b -> a", or "" if there is none.
std::string FindCycle(const FolderGraph& g) {
  std::map<std::string, int> state;  // 1: on the path, 2: done
  std::vector<std::string> path;
  std::string cycle;
  std::function<bool(const std::string&)> visit = [&](const std::string& n) {
    state[n] = 1;
    path.push_back(n);
    auto it = g.find(n);
    if (it != g.end()) {
      for (const auto& [to, file] : it->second) {
        if (state[to] == 1) {
          auto at = std::find(path.begin(), path.end(), to);
          for (; at != path.end(); ++at) cycle += *at + " -> ";
          cycle += to;
          return true;
        }
        if (state[to] == 0 && visit(to)) return true;
      }
    }
    path.pop_back();
    state[n] = 2;
    return false;
  };
  for (const auto& [n, edges] : g) {
    if (state[n] == 0 && visit(n)) return cycle;
  }
  return "";
}

TEST(LayeringTest, FindCycleSeesOneAndNoneWhereThereIsNone) {
  FolderGraph g = {{"a", {{"b", "a/x.h"}}}, {"b", {{"c", "b/y.h"}}}, {"c", {}}};
  EXPECT_EQ(FindCycle(g), "");
  g["c"]["a"] = "c/z.h";
  EXPECT_EQ(FindCycle(g), "a -> b -> c -> a");
}

TEST(LayeringTest, EveryAuditorSourceButTheMainIsInAFolderOfItsOwnJob) {
  const fs::path auditor = RepoRoot() / "auditor";
  int in_folders = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(auditor)) {
    if (e.is_directory()) {
      ++in_folders;
      continue;
    }
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name == "auditor_main.cc" || name == "CMakeLists.txt")
        << "auditor/" << name << " belongs in one of auditor/'s folders";
  }
  EXPECT_GE(in_folders, 8);
}

TEST(LayeringTest, AuditorFoldersIncludeEachOtherWithoutACycle) {
  const FolderGraph g = AuditorFolderGraph(RepoRoot() / "auditor");
  ASSERT_TRUE(g.count("detectors") && g.count("campaign") && g.count("target"))
      << "the walk did not see the auditor's folders";
  const std::string cycle = FindCycle(g);
  EXPECT_EQ(cycle, "") << "the auditor's folders include each other in a "
                          "cycle: "
                       << cycle;
}

TEST(LayeringTest, DetectorsAndReportsNeverIncludeTheCommands) {
  const FolderGraph g = AuditorFolderGraph(RepoRoot() / "auditor");
  const std::map<std::string, std::set<std::string>> forbidden = {
      {"detectors", {"campaign", "audits", "cli"}},
      {"reports", {"campaign", "audits", "cli", "detectors"}},
      {"result", {"campaign", "audits", "cli", "detectors", "reports"}},
      {"target", {"campaign", "audits", "cli", "detectors", "result"}},
  };
  for (const auto& [from, edges] : g) {
    for (const auto& [to, file] : edges) {
      if (to == "cli") {
        ADD_FAILURE() << "auditor/" << file
                      << " includes cli/: only the binary may";
      }
      auto f = forbidden.find(from);
      if (f != forbidden.end() && f->second.count(to)) {
        ADD_FAILURE() << "auditor/" << file << " (" << from << "/) includes "
                      << to << "/";
      }
    }
  }
}

}  // namespace
}  // namespace kvcanary
