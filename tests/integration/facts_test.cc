// `kvcanary-auditor facts` against the real engine (`kvcanary-engine up`,
// as processes), through the CLI: with the tenants' keys it fills every
// field from the router's GET /version, /v1/models, its Server header and
// its answers; without keys only what needs none; and with --trace the
// nodes' trace streams, which check no credential, show the planted
// request to a reader without a key (a finding, docs/facts.md).
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/nodes/version.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/auditor_cli.h"
#include "tests/integration/cluster.h"
#include "tests/shared_files.h"

namespace kvcanary::testing {
namespace {

using json = nlohmann::json;

constexpr const char* kFields[] = {
    "engine",        "version",      "context_tokens", "input_limit_tokens",
    "usage",         "stream_usage", "cached_tokens",  "completion_without_key",
    "disaggregated", "kv_checksum",  "watermark",      "prefix_cache",
    "page_tokens",   "trace_format"};

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str(), nullptr, false);
}

void ExpectValidDocument(const std::string& path) {
  KVC_REQUIRE_TOOL("python3 -c 'import jsonschema'", "python3-jsonschema");
  const std::string cmd =
      std::string(
          "python3 -c 'import json,sys,jsonschema; "
          "s=json.load(open(sys.argv[1])); "
          "d=json.load(open(sys.argv[2])); "
          "jsonschema.Draft202012Validator(s).validate(d)' ") +
      KVCANARY_SOURCE_DIR + "/docs/campaign-result.schema.json " + path;
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

class FactsCliTest : public SharedClusterTest {
 protected:
  // Runs facts against the router with `extra` flags; the result document.
  json Facts(const std::vector<std::string>& extra, int* exit_code,
             std::string* out) {
    const std::string doc = TempPath("facts.json");
    std::vector<std::string> args = {"facts", "--target=" + cluster_->router(),
                                     "--db=" + TempPath("facts.db"),
                                     "--json=" + doc, "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliRun run = Auditor(args);
    *exit_code = run.exit_code;
    *out = run.out;
    ExpectValidDocument(doc);
    return ReadJson(doc);
  }
};

TEST_F(FactsCliTest, FillsEveryFieldOnOurEngine) {
  int exit_code = -1;
  std::string out;
  const json doc = Facts({"--tenants=" + WriteTenantsFile()}, &exit_code, &out);
  ASSERT_EQ(exit_code, 0) << out;
  ASSERT_TRUE(doc.contains("facts")) << out;
  const json& f = doc["facts"];
  for (const char* field : kFields) {
    EXPECT_NE(f[field], "not revealed") << field << "\n" << f.dump(2);
  }
  EXPECT_EQ(f["engine"], "kvcanary");
  EXPECT_EQ(f["version"], engine::kEngineVersion);
  EXPECT_EQ(f["context_tokens"], 512);
  EXPECT_EQ(f["input_limit_tokens"], 256);
  EXPECT_EQ(f["disaggregated"], true);
  EXPECT_EQ(f["kv_checksum"], "crc32c");
  EXPECT_EQ(f["watermark"], "enforce");
  EXPECT_EQ(f["prefix_cache"], "tenant");
  EXPECT_EQ(f["page_tokens"], 16);
  EXPECT_EQ(f["trace_format"], "kvt2");
  EXPECT_EQ(f["cache_salt"], "ignore");
  EXPECT_EQ(f["tenant_header"], "off");
  EXPECT_EQ(f["host_tier_pages"], "off");
  EXPECT_EQ(f["stream_usage"], "always");
  EXPECT_EQ(f["completion_without_key"], "refused");
  EXPECT_EQ(f["sources"]["engine"]["source"], "GET /version .engine as acme");
  EXPECT_EQ(f["fields_revealed"], "17 of 17");
  // The plant was read back by no key and the three other tenants.
  EXPECT_EQ(f["exposure"]["planted"], true);
  EXPECT_EQ(f["exposure"]["readers"].size(), 4u);
  EXPECT_EQ(doc["verdict"], "clean");
  // For people: the fields on stdout.
  EXPECT_NE(out.find("engine: kvcanary"), std::string::npos) << out;
}

TEST_F(FactsCliTest, WithoutTenantsOnlyKeylessFactsAndExposureInconclusive) {
  int exit_code = -1;
  std::string out;
  const std::string junit = TempPath("facts.xml");
  const json doc = Facts({"--junit=" + junit}, &exit_code, &out);
  EXPECT_EQ(exit_code, 3) << out;
  // The required checks that did not run fail the JUnit gate.
  std::ifstream in(junit);
  std::stringstream xml;
  xml << in.rdbuf();
  EXPECT_NE(xml.str().find("<error"), std::string::npos) << xml.str();
  EXPECT_NE(xml.str().find("required, did not run"), std::string::npos)
      << xml.str();
  const json& f = doc["facts"];
  // The Server header and /metrics need no key; /version does.
  EXPECT_EQ(f["engine"], "kvcanary");
  EXPECT_EQ(f["version"], engine::kEngineVersion);
  EXPECT_EQ(f["watermark"], "not revealed");
  EXPECT_EQ(f["exposure"]["planted"], false);
  EXPECT_NE(out.find("no --tenants"), std::string::npos) << out;
}

// The engine nodes' /v1/trace needs the admin token, and the internal
// routes the internal secret: facts, reading them without either after
// planting as acme, finds nothing exposed and says the trace refused it.
TEST_F(FactsCliTest, NodeTraceAndInternalRoutesRefuseAReaderWithoutTokens) {
  int exit_code = -1;
  std::string out;
  const json doc =
      Facts({"--tenants=" + WriteTenantsFile(),
             "--trace=" + cluster_->prefill() + "," + cluster_->decode()},
            &exit_code, &out);
  ASSERT_EQ(exit_code, 0) << out;
  EXPECT_TRUE(doc["incidents"].empty()) << doc["incidents"].dump(2);
  ASSERT_EQ(doc["facts"]["exposure"]["traces"].size(), 2u)
      << doc["facts"]["exposure"].dump(2);
  for (const json& t : doc["facts"]["exposure"]["traces"]) {
    EXPECT_FALSE(t["followed"].get<bool>()) << t.dump();
    EXPECT_EQ(t["events"], 0) << t.dump();
    EXPECT_NE(t["error"].get<std::string>().find("HTTP 401"), std::string::npos)
        << t.dump();
  }
  EXPECT_EQ(doc["facts"]["exposure"]["planted"], true);
  // The nodes' /health still answers, and the router's /version agrees.
  EXPECT_EQ(doc["facts"]["watermark"], "enforce");
}

}  // namespace
}  // namespace kvcanary::testing
