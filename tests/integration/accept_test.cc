// `kvcanary-auditor accept` as a process against real engines
// (`kvcanary-engine up`): the long-context acceptance sweep the 2026
// incident's launch lacked. With admission-abort-lost a prompt past the
// advertised limit is admitted; with watermarks off it comes back HTTP 200
// with the real prompt_tokens (the incident as clients saw it), with the
// default `enforce` as a 502 — and a 5xx is not a refusal either. Both
// fail at the first length past the limit, named in the JUnit file. Plain
// `up` passes.
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/auditor_cli.h"
#include "tests/integration/cluster.h"
#include "tests/shared_files.h"

namespace kvcanary::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct AcceptRun {
  CliRun cli;
  nlohmann::json doc;  // the --json document
  std::string junit;
};

AcceptRun RunAccept(const Cluster& cluster, const std::string& name,
                    const std::vector<std::string>& extra = {}) {
  const std::string json = TempPath(name + ".json");
  const std::string junit = TempPath(name + ".xml");
  std::vector<std::string> args = {"accept",
                                   "--target=" + cluster.router(),
                                   "--tenants=" + WriteTenantsFile(),
                                   "--db=" + TempPath(name + ".db"),
                                   "--json=" + json,
                                   "--junit=" + junit,
                                   "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  AcceptRun r;
  r.cli = Auditor(args);
  r.doc = nlohmann::json::parse(ReadFile(json), nullptr, false);
  r.junit = ReadFile(junit);
  return r;
}

// The JUnit case of `check` at `subject` and what it holds, up to its end.
std::string JunitCase(const std::string& junit, const std::string& check,
                      const std::string& subject) {
  const std::string head =
      "classname=\"kvcanary.accept." + check + "\" name=\"" + subject + "\"";
  const size_t at = junit.find(head);
  if (at == std::string::npos) return "";
  return junit.substr(at, junit.find("</testcase>", at) - at);
}

int FindingsOfKind(const nlohmann::json& doc, const std::string& kind) {
  if (!doc.is_object() || !doc.contains("findings")) return 0;
  return doc["findings"]["by_kind"].value(kind, 0);
}

// The incident as its clients saw it: HTTP 200, the real prompt_tokens.
// The sweep's refusal check fails at the first length past the limit.
TEST(AcceptCliTest, AdmissionAbortLostWithWatermarksOffFailsPastTheLimit) {
  Cluster cluster({"--fault=admission-abort-lost", "--watermark=off"});
  ASSERT_TRUE(cluster.ok());
  const AcceptRun r = RunAccept(cluster, "abort-off");
  EXPECT_EQ(r.cli.exit_code, 1) << r.cli.out;
  const std::string c = JunitCase(r.junit, "refusal", "length 257");
  EXPECT_NE(c.find("<failure"), std::string::npos) << r.junit;
  // The incident's signature: the count is right, the prompt was not read.
  EXPECT_NE(c.find("HTTP 200"), std::string::npos) << c;
  EXPECT_NE(c.find("usage.prompt_tokens 257"), std::string::npos) << c;
  EXPECT_GE(FindingsOfKind(r.doc, "boundary_accepted"), 2) << r.doc.dump(2);
  // Within the advertised limit the engine is right: nothing failed there.
  for (const auto& check : r.doc["checks"]) {
    if (check["state"] != "failed") continue;
    const std::string subject = check["subject"];
    EXPECT_GT(std::stoi(subject.substr(7)), 256) << check.dump();
  }
  EXPECT_EQ(r.doc["limit"]["refuse_above"], 256);
}

// With the default watermark mode the faulted requests get 502: the
// engine's check stopped the read, but the prompt was still admitted past
// the limit. A 5xx is not a refusal.
TEST(AcceptCliTest, AdmissionAbortLostWithEnforceIsAFindingNotARefusal) {
  Cluster cluster({"--fault=admission-abort-lost"});
  ASSERT_TRUE(cluster.ok());
  const AcceptRun r = RunAccept(cluster, "abort-enforce");
  EXPECT_EQ(r.cli.exit_code, 1) << r.cli.out;
  const std::string c = JunitCase(r.junit, "refusal", "length 257");
  EXPECT_NE(c.find("<failure"), std::string::npos) << r.junit;
  EXPECT_NE(c.find("HTTP 502"), std::string::npos) << c;
  EXPECT_NE(c.find("a 5xx is not a refusal"), std::string::npos) << c;
  EXPECT_GE(FindingsOfKind(r.doc, "boundary_not_refused"), 2) << r.doc.dump(2);
  EXPECT_EQ(FindingsOfKind(r.doc, "boundary_accepted"), 0);
}

// Plain `up`, under the load of two other tenants: clean. The embedded
// model never echoes, so golden carries the sweep.
TEST(AcceptCliTest, PlainEnginePassesWithGoldenUnderLoad) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  const AcceptRun r = RunAccept(cluster, "plain", {"--load=2"});
  EXPECT_EQ(r.cli.exit_code, 0) << r.cli.out;
  EXPECT_NE(r.cli.out.find("accept c"), std::string::npos) << r.cli.out;
  EXPECT_NE(r.cli.out.find(": clean (exit 0)"), std::string::npos);
  EXPECT_NE(r.cli.out.find("relying on golden"), std::string::npos)
      << r.cli.out;
  ASSERT_TRUE(r.doc.is_object()) << r.cli.out;
  EXPECT_EQ(r.doc["verdict"], "clean");
  EXPECT_EQ(r.doc["accept"]["sweep"]["filler"]["pad"], " a");
  EXPECT_GT(r.doc["accept"]["sweep"]["load"]["answered"].get<int>(), 0);
  const std::string c = JunitCase(r.junit, "golden_under_load", "length 256");
  EXPECT_NE(c.find("<system-out>the answer recorded alone"), std::string::npos)
      << r.junit;
  EXPECT_NE(
      JunitCase(r.junit, "refusal", "length 257").find("refused: HTTP 400"),
      std::string::npos)
      << r.junit;
}

// stories260K echoes a nonce: the end position is covered at most lengths
// its echo prompt fits (95..256 measured), and the sweep is clean with echo
// required where it covers a pair.
TEST(AcceptCliTest, Stories260KCoversEchoPairsAndIsClean) {
  KVC_REQUIRE_SHARED("models/stories260K.bin", "models/tok512.bin");
  const std::string models = shared_files::Path("models");
  Cluster cluster({"--model=" + models + "/stories260K.bin",
                   "--tokenizer=" + models + "/tok512.bin"});
  ASSERT_TRUE(cluster.ok());
  const AcceptRun r = RunAccept(cluster, "stories", {"--load=2"});
  EXPECT_EQ(r.cli.exit_code, 0) << r.cli.out;
  ASSERT_TRUE(r.doc.is_object()) << r.cli.out;
  int end_pairs = 0;
  for (const auto& pair : r.doc["accept"]["sweep"]["covered_pairs"]) {
    end_pairs += pair[1] == "end";
  }
  // Which pairs echo depends on the nonce drawn (a random one per run):
  // usually the end at most lengths; with an unlucky nonce, none, and then
  // the echo detector must say so and golden carries the sweep.
  for (const auto& d : r.doc["detectors"]) {
    if (d["name"] != "echo") continue;
    if (end_pairs > 0) {
      EXPECT_EQ(d["state"], "active") << d.dump();
    } else {
      EXPECT_EQ(d["state"], "disabled") << d.dump();
      EXPECT_NE(d["reason"].get<std::string>().find("no (length, position)"),
                std::string::npos)
          << d.dump();
    }
  }
}

}  // namespace
}  // namespace kvcanary::testing
