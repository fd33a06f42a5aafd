// The engine's folders are layers (engine/CMakeLists.txt,
// docs/architecture.md): model/ and transfer/ include nothing else of the
// engine, core/ only those two, kv_events/ those three, nodes/ any of them,
// and nothing in the library includes app/ (main and the demos).
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace kvcanary {
namespace {

namespace fs = std::filesystem;

// The engine folders each folder may include (besides itself).
const std::map<std::string, std::set<std::string>>& Allowed() {
  static const auto* allowed = new std::map<std::string, std::set<std::string>>{
      {"model", {}},
      {"transfer", {}},
      {"core", {"model", "transfer"}},
      {"kv_events", {"model", "transfer", "core"}},
      {"nodes", {"model", "transfer", "core", "kv_events"}},
      {"app", {"model", "transfer", "core", "kv_events", "nodes"}},
  };
  return *allowed;
}

// The engine folders `text` includes ("engine/<folder>/...").
std::set<std::string> IncludedFolders(const std::string& text) {
  static const std::regex kInclude(R"(^\s*#\s*include\s*["<]engine/(\w+)/)");
  std::set<std::string> out;
  std::istringstream lines(text);
  std::string line;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_search(line, m, kInclude)) out.insert(m[1]);
  }
  return out;
}

// KVCANARY_SOURCE_DIR: the repository root (tests/CMakeLists.txt); __FILE__
// may be relative to the build directory.
fs::path EngineDir() { return fs::path(KVCANARY_SOURCE_DIR) / "engine"; }

TEST(EngineLayeringTest, DetectorReadsFoldersFromIncludes) {
  EXPECT_EQ(IncludedFolders("#include \"engine/core/engine.h\"\n"
                            "  #  include <engine/model/model.h>\n"
                            "// #include engine/nodes/router.h\n"),
            (std::set<std::string>{"core", "model"}));
}

TEST(EngineLayeringTest, EachFolderIncludesOnlyTheLayersBelowIt) {
  ASSERT_TRUE(fs::is_directory(EngineDir())) << EngineDir();
  int files = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(EngineDir())) {
    if (e.is_regular_file()) {
      EXPECT_EQ(e.path().filename(), "CMakeLists.txt")
          << e.path() << ": every engine source lives in a layer folder";
      continue;
    }
    const std::string folder = e.path().filename().string();
    auto allowed = Allowed().find(folder);
    ASSERT_NE(allowed, Allowed().end())
        << "engine/" << folder << " is not a known layer";
    for (const fs::directory_entry& f :
         fs::recursive_directory_iterator(e.path())) {
      if (!f.is_regular_file()) continue;  // app/cli/'s files are app's
      std::ifstream in(f.path());
      std::ostringstream text;
      text << in.rdbuf();
      ++files;
      for (const std::string& used : IncludedFolders(text.str())) {
        if (used == folder) continue;
        EXPECT_TRUE(allowed->second.count(used) > 0)
            << f.path().string() << " (" << folder << ") includes engine/"
            << used << "/";
      }
    }
  }
  EXPECT_GT(files, 40);
}

}  // namespace
}  // namespace kvcanary
