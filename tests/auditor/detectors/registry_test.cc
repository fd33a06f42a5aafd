// The detector registry: every campaign detector registered by its own
// file, in report order, and the flags that name detectors checked against
// it.
#include "auditor/detectors/registry.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

TEST(DetectorRegistryTest, TheBuiltinDetectorsInReportOrder) {
  EXPECT_EQ(DetectorRegistry::Global().Names(),
            (std::vector<std::string>{"output_scan", "golden", "logprob_golden",
                                      "prompt_logprobs", "echo", "boundary",
                                      "latency", "trace", "kv_events",
                                      "cache_refusal", "hangups", "bursts"}));
  for (const auto& e : DetectorRegistry::Global().Entries()) {
    EXPECT_FALSE(e.spec.summary.empty()) << e.spec.name;
    EXPECT_FALSE(e.spec.unit.empty()) << e.spec.name;
    EXPECT_EQ(e.make()->spec().name, e.spec.name);
  }
}

// docs/auditor.md's coverage table names every registered detector, and
// nothing else: a detector added without its documentation fails here.
TEST(DetectorRegistryTest, NamesAgreeWithDocsAuditorMd) {
  std::ifstream in(std::string(KVCANARY_SOURCE_DIR) + "/docs/auditor.md");
  ASSERT_TRUE(in.good());
  std::string line;
  bool in_table = false;
  std::set<std::string> documented;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "| detector | counts per tenant |")) {
      in_table = true;
      continue;
    }
    if (!in_table) continue;
    if (!absl::StartsWith(line, "|")) break;
    const std::vector<std::string> cells = absl::StrSplit(line, '|');
    absl::string_view name = absl::StripAsciiWhitespace(cells[1]);
    if (absl::ConsumePrefix(&name, "`") && absl::ConsumeSuffix(&name, "`")) {
      documented.insert(std::string(name));
    }
  }
  const std::vector<std::string> names = DetectorRegistry::Global().Names();
  EXPECT_EQ(documented, std::set<std::string>(names.begin(), names.end()));
}

TEST(DetectorFlagsTest, FloorsAreADefaultThenOverrides) {
  auto f = ParseFloors("20,trace=5, echo=10,kv_events=2");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)[""], 20);
  EXPECT_EQ((*f)["trace"], 5);
  EXPECT_EQ((*f)["echo"], 10);
  EXPECT_EQ((*f)["kv_events"], 2);
  EXPECT_FALSE(ParseFloors("tracer=5").ok());
  EXPECT_FALSE(ParseFloors("-1").ok());
  EXPECT_FALSE(ParseFloors("0").ok());  // active with nothing checked
  EXPECT_FALSE(ParseFloors("20,trace=0").ok());
  EXPECT_FALSE(ParseFloors("golden=many").ok());
  EXPECT_FALSE(ParseFloors("20,trace=5,trace=7").ok());  // which one?
  EXPECT_FALSE(ParseFloors("20,12").ok());
}

TEST(DetectorFlagsTest, RequireTakesRegisteredNamesOnly) {
  EXPECT_EQ(ParseDetectorList("golden,echo")->size(), 2u);
  EXPECT_EQ(*ParseDetectorList("kv_events"),
            std::set<std::string>{"kv_events"});
  const auto bad = ParseDetectorList("golden,psychic");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown detector 'psychic'"),
            std::string::npos);
  EXPECT_NE(bad.status().message().find("kv_events"), std::string::npos)
      << "the message lists the known ones";
}

// A registry of its own, so the test does not touch the global one.
TEST(DetectorRegistryTest, ScopedRegistrationAddsThenRemoves) {
  DetectorRegistry r;
  DetectorSpec s;
  s.name = "scoped";
  s.unit = "things";
  {
    DetectorRegistration reg(
        s, [] { return nullptr; }, &r);
    EXPECT_TRUE(r.Has("scoped"));
    EXPECT_TRUE(ParseDetectorList("scoped", r).ok());
  }
  EXPECT_FALSE(r.Has("scoped"));
  EXPECT_FALSE(ParseDetectorList("scoped", r).ok());
}

TEST(DetectorRegistryDeathTest, ANameThatIsNotSnakeCaseIsAProgrammingError) {
  DetectorRegistry r;
  DetectorSpec s;
  s.name = "Bad-Name";
  s.unit = "things";
  EXPECT_DEATH(r.Add(s, [] { return nullptr; }), "snake_case");
  s.name = "good";
  r.Add(s, [] { return nullptr; });
  EXPECT_DEATH(r.Add(s, [] { return nullptr; }), "registered twice");
}

}  // namespace
}  // namespace kvcanary::auditor
