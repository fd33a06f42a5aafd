// `facts` against servers we did not write: the scripted fakes of
// tests/auditor/fakes/fake_target.h (each flavor's own info endpoints), a tiny
// server that reveals nothing, and llama.cpp-style /slots endpoints that
// show the last prompt — to no key, or to any valid key. Every value must
// come from a field that states it; every exposure is proven by a marker.
#include "auditor/audits/facts/facts.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "auditor/audits/facts/exposure.h"
#include "auditor/audits/facts/fields.h"
#include "auditor/audits/facts/reads.h"
#include "auditor/reports/report.h"
#include "canaries/marker.h"
#include "canaries/scanner.h"
#include "common/http_server.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "storage/evidence_store.h"
#include "tests/auditor/fakes/fake_target.h"
#include "tests/shared_files.h"
#include "tests/temp_path.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;
using testing::AdvertisedContext;
using testing::FakeTarget;
using testing::FakeTargetOptions;
using testing::Flavor;

constexpr char kKey[] = "facts-test-secret-key-0123456789";

std::string Db(const std::string& name) {
  return testing_paths::UniqueTempPath("kvcanary-facts", name + ".db");
}

FactsOptions Options(const std::string& url, std::vector<AuditTenant> tenants,
                     const std::string& name) {
  FactsOptions o;
  o.target.target = url;
  o.target.tenants = std::move(tenants);
  o.target.request_timeout = absl::Seconds(20);
  o.db_path = Db(name);
  o.secret_key = kKey;
  o.progress = false;
  return o;
}

std::string Explain(const CampaignResult& r) { return r.ToJson().dump(2); }

const DetectorCoverage* Detector(const CampaignResult& r,
                                 const std::string& name) {
  for (const DetectorCoverage& d : r.detectors) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

std::vector<Check> ChecksOf(const CampaignResult& r, const std::string& check) {
  std::vector<Check> out;
  for (const Check& c : r.checks) {
    if (c.check == check) out.push_back(c);
  }
  return out;
}

// The result document must validate against the schema (when Debian's
// python3-jsonschema is installed).
void ExpectValidDocument(const CampaignResult& r) {
  KVC_REQUIRE_TOOL("python3 -c 'import jsonschema'", "python3-jsonschema");
  const std::string doc = Db("doc") + ".json";
  std::ofstream(doc) << r.ToJson().dump(2);
  const std::string cmd = absl::StrCat(
      "python3 -c 'import json,sys,jsonschema; "
      "s=json.load(open(sys.argv[1])); d=json.load(open(sys.argv[2])); "
      "jsonschema.Draft202012Validator(s).validate(d)' ",
      KVCANARY_SOURCE_DIR, "/docs/campaign-result.schema.json ", doc);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << Explain(r);
}

// Every evidence row of the run, as text.
std::string EvidenceText(const std::string& db) {
  auto store = storage::EvidenceStore::Open(db);
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return "";
  auto rows = (*store)->Query(storage::EvidenceFilter{});
  EXPECT_TRUE(rows.ok()) << rows.status();
  std::string all;
  for (const storage::EvidenceRow& row : *rows) {
    absl::StrAppend(&all, row.record.kind, " ", row.record.body.dump(), "\n");
  }
  return all;
}

// The marker `facts` plants as `tenant` in campaign `campaign`.
canaries::Marker PlantedMarker(const std::string& tenant,
                               const std::string& campaign) {
  return canaries::DeriveMarker(kKey, tenant, campaign, 0);
}

// --- Exposure: a llama.cpp-style /slots showing the last prompt ---

TEST(FactsTest, SlotsShowingPromptsWithoutAKeyIsACriticalExposure) {
  FakeTargetOptions fo;
  fo.flavor = Flavor::kLlamaCpp;
  fo.slots_expose_prompts = true;  // started without --api-key: all open
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const FactsOptions o = Options(target.url(), {{"acme", "sk-a"}}, "slots");
  const CampaignResult r = RunFacts(o, &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  ASSERT_EQ(r.findings.size(), 1u) << Explain(r);
  const Finding& f = r.findings[0];
  EXPECT_EQ(f.detector, "exposure");
  EXPECT_EQ(f.kind, "prompt_exposed");
  EXPECT_EQ(f.severity, Severity::kCritical);
  EXPECT_EQ(f.writer, "acme");
  EXPECT_EQ(f.reader, kNoKeyReader);
  EXPECT_EQ(f.detail["endpoint"], "/slots");
  EXPECT_EQ(f.detail["found"], "marker");
  EXPECT_EQ(f.detail["exact"], true);
  const canaries::Marker m = PlantedMarker("acme", r.campaign_id);
  EXPECT_EQ(f.detail["marker"], m.id);
  ASSERT_EQ(r.incidents.size(), 1u);
  EXPECT_EQ(SeverityName(r.incidents[0].severity), std::string("critical"));
  // The exposure check of the keyless reader failed, naming /slots; the
  // one for another tenant's key (there is none) did not run.
  const std::vector<Check> exposure = ChecksOf(r, "exposure");
  ASSERT_EQ(exposure.size(), 2u) << Explain(r);
  EXPECT_EQ(exposure[0].subject, kNoKeyReader);
  EXPECT_EQ(exposure[0].state, "failed");
  EXPECT_TRUE(absl::StrContains(exposure[0].message, "/slots"))
      << exposure[0].message;
  EXPECT_EQ(exposure[1].subject, "another tenant's key");
  EXPECT_EQ(exposure[1].state, "skipped");
  // Evidence holds the marker's id and hashes, never its words.
  const std::string evidence = EvidenceText(o.db_path);
  EXPECT_NE(evidence.find(m.id), std::string::npos);
  EXPECT_EQ(evidence.find(m.text), std::string::npos);
  EXPECT_EQ(r.ToJson().dump().find(m.text), std::string::npos);
  ExpectValidDocument(r);
}

TEST(FactsTest, SlotsShowingAnotherTenantsPromptToAnyValidKeyIsCritical) {
  FakeTargetOptions fo;
  fo.flavor = Flavor::kLlamaCpp;
  fo.slots_expose_prompts = true;
  // --api-key: /slots needs a key, and shows the last prompt to any key.
  fo.api_keys = {{"sk-a", "acme"}, {"sk-g", "globex"}};
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r = RunFacts(
      Options(target.url(), {{"acme", "sk-a"}, {"globex", "sk-g"}}, "keyed"),
      &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  ASSERT_EQ(r.findings.size(), 1u) << Explain(r);
  const Finding& f = r.findings[0];
  EXPECT_EQ(f.kind, "prompt_exposed");
  EXPECT_EQ(f.severity, Severity::kCritical);
  EXPECT_EQ(f.writer, "acme");
  EXPECT_EQ(f.reader, "globex");  // B read A's marker; no key got a 401
  EXPECT_EQ(f.detail["endpoint"], "/slots");
  EXPECT_EQ(f.detail["marker"], PlantedMarker("acme", r.campaign_id).id);
  ASSERT_EQ(ChecksOf(r, "exposure").size(), 2u) << Explain(r);
  for (const Check& c : ChecksOf(r, "exposure")) {
    EXPECT_EQ(c.state, c.subject == "globex" ? "failed" : "passed")
        << c.subject << ": " << c.message;
  }
  ExpectValidDocument(r);
}

TEST(FactsTest, SlotsWithCountsOnlyIsClean) {
  FakeTargetOptions fo;
  fo.flavor = Flavor::kLlamaCpp;  // /slots shows counts, not text
  fo.api_keys = {{"sk-a", "acme"}, {"sk-g", "globex"}};
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r = RunFacts(
      Options(target.url(), {{"acme", "sk-a"}, {"globex", "sk-g"}}, "counts"),
      &metrics);
  EXPECT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_TRUE(r.findings.empty());
  const DetectorCoverage* exposure = Detector(r, "exposure");
  ASSERT_NE(exposure, nullptr);
  EXPECT_EQ(exposure->state, DetectorState::kActive) << Explain(r);
  EXPECT_EQ(exposure->coverage.at(kNoKeyReader),
            static_cast<int>(FactsTargetPaths().size()));
  EXPECT_EQ(exposure->coverage.at("globex"),
            static_cast<int>(FactsTargetPaths().size()));
  ExpectValidDocument(r);
}

// A server without /v1/completions (its chat rendered through a template)
// is read over chat: the result names the API, and each fact its
// completion states names the request it came from.
TEST(FactsTest, AChatOnlyTargetIsReadOverChatNamingTheRequest) {
  FakeTargetOptions fo;
  fo.flavor = Flavor::kLlamaCpp;
  fo.api_keys = {{"sk-a", "acme"}, {"sk-g", "globex"}};
  fo = testing::ChatOnly(fo);
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r = RunFacts(
      Options(target.url(), {{"acme", "sk-a"}, {"globex", "sk-g"}}, "chat"),
      &metrics);
  EXPECT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.api, "chat");
  const std::string doc = r.ToJson().dump();
  EXPECT_NE(doc.find("POST /v1/chat/completions (plain"), std::string::npos)
      << doc.substr(0, 2000);
  EXPECT_EQ(doc.find("POST /v1/completions"), std::string::npos);
  ExpectValidDocument(r);
}

// Every flavour's chat-only fake, through its template: clean, the API
// named.
TEST(FactsTest, EveryFlavoursChatOnlyFakeIsReadCleanOverChat) {
  for (Flavor flavor : {Flavor::kVllm, Flavor::kSglang, Flavor::kLlamaCpp,
                        Flavor::kTgi, Flavor::kOllama}) {
    SCOPED_TRACE(testing::FlavorName(flavor));
    FakeTargetOptions fo;
    fo.flavor = flavor;
    fo.api_keys = {{"sk-a", "acme"}, {"sk-g", "globex"}};
    FakeTarget target(testing::ChatOnly(fo));
    AuditorMetrics metrics;
    const CampaignResult r =
        RunFacts(Options(target.url(), {{"acme", "sk-a"}, {"globex", "sk-g"}},
                         absl::StrCat("chat-", testing::FlavorName(flavor))),
                 &metrics);
    EXPECT_EQ(r.verdict, Verdict::kClean) << Explain(r);
    EXPECT_EQ(r.exit_code(), 0);
    EXPECT_EQ(r.api, "chat");
  }
}

// A /v1/completions answering a non-OpenAI 200: read over llama.cpp's own
// shape, or over chat where the shape is unknown; the API named.
TEST(FactsTest, ANonOpenAiCompletionsBodyIsReadOverTheApiAutoChose) {
  for (const auto& [route, api] :
       {std::pair{testing::CompletionsRoute::kLlamaNative, "completions"},
        std::pair{testing::CompletionsRoute::kUnknownShape, "chat"}}) {
    SCOPED_TRACE(api);
    FakeTargetOptions fo;
    fo.flavor = Flavor::kLlamaCpp;
    fo.api_keys = {{"sk-a", "acme"}, {"sk-g", "globex"}};
    fo.completions_route = route;
    fo.chat_template = true;
    FakeTarget target(fo);
    AuditorMetrics metrics;
    const CampaignResult r =
        RunFacts(Options(target.url(), {{"acme", "sk-a"}, {"globex", "sk-g"}},
                         std::string("shape-") + api),
                 &metrics);
    EXPECT_EQ(r.verdict, Verdict::kClean) << Explain(r);
    EXPECT_EQ(r.exit_code(), 0);
    EXPECT_EQ(r.api, api);
    ExpectValidDocument(r);
  }
}

// --- A target that reveals nothing, and what it answers after the plant ---

// How a SilentTarget answers; the defaults reveal nothing.
struct SilentOptions {
  int slots_status = 404;  // GET /slots (llama.cpp without --slots: 501)
  // After the plant (a completion holding "Keep this note"): every GET of
  // `after_plant_path` ("": every path) answers this status (0: as before).
  int after_plant_status = 0;
  std::string after_plant_path;
  // The plant is answered 200 with an error object rather than a choice.
  bool plant_error_body = false;
};

// Answers GET /v1/models with an id and POST /v1/completions with a bare
// choice (no usage, no id, no stream), and 404 to any other GET (as
// SilentOptions says otherwise); records every request's method and path.
class SilentTarget {
 public:
  explicit SilentTarget(SilentOptions o = {}) : o_(std::move(o)) {
    // Every path but POST /v1/completions.
    server_.set_not_found_handler(
        [this](const http::Request& req, http::Response& res) {
          Record(req);
          if (req.method != "GET" && req.method != "HEAD") {
            res.status = 404;
          } else if (planted_ && o_.after_plant_status != 0 &&
                     (o_.after_plant_path.empty() ||
                      req.path == o_.after_plant_path)) {
            res.status = o_.after_plant_status;
          } else if (req.path == "/v1/models") {
            res.set_content(R"({"data":[{"id":"m"}]})", "application/json");
          } else if (req.path == "/slots") {
            res.status = o_.slots_status;
          } else {
            res.status = 404;
          }
        });
    server_.Post("/v1/completions", [this](const http::Request& req,
                                           http::Response& res) {
      Record(req);
      const bool plant = absl::StrContains(req.body, "Keep this note");
      if (plant && o_.plant_error_body) {
        res.set_content(
            R"({"error":{"message":"overloaded","type":"server_error","code":500}})",
            "application/json");
      } else {
        res.set_content(R"({"choices":[{"text":" ok"}]})", "application/json");
      }
      if (plant) planted_ = true;
    });
    port_ = server_.Bind("127.0.0.1", 0).value();
    server_.Start();
  }
  ~SilentTarget() { server_.Stop(); }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  std::set<std::string> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  void Record(const http::Request& req) {
    std::lock_guard<std::mutex> lock(mu_);
    seen_.insert(req.method + " " + req.path);
  }

  const SilentOptions o_;
  http::Server server_;
  int port_ = 0;
  std::atomic<bool> planted_{false};
  std::mutex mu_;
  std::set<std::string> seen_;
};

std::vector<AuditTenant> TwoTenants() {
  return {{"acme", "sk-a"}, {"globex", "sk-g"}};
}

TEST(FactsTest, TargetThatRevealsNothingHasEveryFieldNotRevealed) {
  SilentTarget target;
  AuditorMetrics metrics;
  const CampaignResult r =
      RunFacts(Options(target.url(), TwoTenants(), "silent"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.model, "m");
  // Nothing is stated; the one thing measured is that a completion
  // without a key is served.
  for (const char* field : kFactFields) {
    if (std::string(field) == "completion_without_key") continue;
    EXPECT_EQ(r.details[field], kNotRevealed) << field;
    EXPECT_EQ(r.details["sources"][field]["value"], kNotRevealed) << field;
  }
  EXPECT_EQ(r.details["completion_without_key"], "served");
  EXPECT_EQ(r.details["fields_revealed"], "1 of 17");
  // One check per endpoint: /v1/models answered, the others 404.
  for (const Check& c : ChecksOf(r, "endpoint")) {
    EXPECT_EQ(c.state, c.subject == "GET /v1/models" ? "passed" : "skipped")
        << c.subject << ": " << c.message;
  }
  EXPECT_EQ(ChecksOf(r, "endpoint").size(), FactsTargetPaths().size());
  ASSERT_EQ(ChecksOf(r, "exposure").size(), 2u) << Explain(r);
  for (const Check& c : ChecksOf(r, "exposure")) {
    EXPECT_EQ(c.state, "passed") << c.subject << ": " << c.message;
  }
  // GET only: the one POST besides completions is discovery's read-only
  // Ollama /api/show (auditor/target/limits.h).
  for (const std::string& s : target.seen()) {
    EXPECT_TRUE(absl::StartsWith(s, "GET ") || s == "POST /v1/completions" ||
                s == "POST /api/show")
        << s;
  }
  ExpectValidDocument(r);
}

TEST(FactsTest, A501IsNotThereAndSkipped) {
  SilentOptions so;
  so.slots_status = 501;  // llama.cpp started without --slots
  SilentTarget target(so);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunFacts(Options(target.url(), TwoTenants(), "501"), &metrics);
  EXPECT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  bool seen = false;
  for (const Check& c : ChecksOf(r, "endpoint")) {
    if (c.subject != "GET /slots") continue;
    seen = true;
    EXPECT_EQ(c.state, "skipped") << c.message;
    EXPECT_TRUE(absl::StrContains(c.message, "501")) << c.message;
  }
  EXPECT_TRUE(seen) << Explain(r);
}

// A 429 or a 5xx reads nothing: an endpoint that answers only those after
// the plant was not searched, so the run cannot be clean.
TEST(FactsTest, ThrottledOrFailingReadsAfterThePlantAreNotClean) {
  struct Case {
    int status;
    std::string path;
  };
  for (const Case& c : {Case{429, ""}, Case{503, "/slots"}}) {
    SCOPED_TRACE(absl::StrCat(c.status, " ", c.path));
    SilentOptions so;
    so.after_plant_status = c.status;
    so.after_plant_path = c.path;
    SilentTarget target(so);
    AuditorMetrics metrics;
    const CampaignResult r =
        RunFacts(Options(target.url(), TwoTenants(), "throttled"), &metrics);
    EXPECT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
    const DetectorCoverage* exposure = Detector(r, "exposure");
    ASSERT_NE(exposure, nullptr);
    EXPECT_EQ(exposure->state, DetectorState::kInconclusive) << Explain(r);
    const int expected = static_cast<int>(FactsTargetPaths().size()) -
                         (c.path.empty() ? FactsTargetPaths().size() : 1);
    EXPECT_EQ(exposure->coverage.at(kNoKeyReader), expected);
    EXPECT_EQ(exposure->coverage.at("globex"), expected);
    const std::vector<Check> readers = ChecksOf(r, "exposure");
    ASSERT_EQ(readers.size(), 2u) << Explain(r);
    for (const Check& check : readers) {
      EXPECT_EQ(check.state, "error") << check.subject << ": " << check.message;
    }
    for (const Check& check : ChecksOf(r, "endpoint")) {
      if (c.path.empty() || check.subject == "GET " + c.path) {
        EXPECT_EQ(check.state, "error") << check.subject;
      }
    }
  }
}

TEST(FactsTest, APlantAnsweredWithAnErrorBodyIsNoPlant) {
  SilentOptions so;
  so.plant_error_body = true;  // 200, {"error": ...}
  SilentTarget target(so);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunFacts(Options(target.url(), TwoTenants(), "unusable"), &metrics);
  EXPECT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  EXPECT_EQ(r.details["exposure"]["planted"], false);
  const std::vector<Check> plant = ChecksOf(r, "plant");
  ASSERT_EQ(plant.size(), 1u);
  EXPECT_EQ(plant[0].state, "error");
  EXPECT_TRUE(absl::StrContains(plant[0].message, "not accepted"))
      << plant[0].message;
  const DetectorCoverage* exposure = Detector(r, "exposure");
  ASSERT_NE(exposure, nullptr);
  EXPECT_EQ(exposure->state, DetectorState::kInconclusive);
}

TEST(FactsTest, OneTenantLeavesReadsByAnotherTenantUnproven) {
  FakeTargetOptions fo;
  fo.flavor = Flavor::kLlamaCpp;  // /slots shows counts, not text
  fo.api_keys = {{"sk-a", "acme"}};
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r = RunFacts(
      Options(target.url(), {{"acme", "sk-a"}}, "one-tenant"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  const DetectorCoverage* exposure = Detector(r, "exposure");
  ASSERT_NE(exposure, nullptr);
  EXPECT_TRUE(absl::StrContains(
      exposure->reason, "one tenant: reads by another tenant's key unproven"))
      << exposure->reason;
  const std::vector<Check> checks = ChecksOf(r, "exposure");
  ASSERT_EQ(checks.size(), 2u) << Explain(r);
  EXPECT_EQ(checks[0].subject, kNoKeyReader);
  EXPECT_EQ(checks[0].state, "passed") << checks[0].message;
  EXPECT_EQ(checks[1].subject, "another tenant's key");
  EXPECT_EQ(checks[1].state, "error");
  // A completion without a key is refused, and that is recorded.
  EXPECT_EQ(r.details["completion_without_key"], "refused");
  // The JUnit report fails: an error case names why.
  const std::string junit = JunitXml(r.ToJson());
  EXPECT_TRUE(absl::StrContains(junit, "<error")) << junit;
  EXPECT_TRUE(absl::StrContains(junit, "reads by another tenant")) << junit;
}

// --- Without tenants ---

TEST(FactsTest, WithoutTenantsOnlyKeylessFactsAndTheExposureCheckIsAnError) {
  FakeTargetOptions fo;
  fo.flavor = Flavor::kVllm;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunFacts(Options(target.url(), {}, "keyless"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  const DetectorCoverage* exposure = Detector(r, "exposure");
  ASSERT_NE(exposure, nullptr);
  EXPECT_EQ(exposure->state, DetectorState::kInconclusive);
  EXPECT_TRUE(absl::StrContains(exposure->reason, "no --tenants"))
      << exposure->reason;
  const DetectorCoverage* facts = Detector(r, "facts");
  ASSERT_NE(facts, nullptr);
  EXPECT_EQ(facts->state, DetectorState::kActive) << Explain(r);
  // Required and not run: errors, never skipped.
  const std::vector<Check> exposure_checks = ChecksOf(r, "exposure");
  ASSERT_EQ(exposure_checks.size(), 1u) << Explain(r);
  EXPECT_EQ(exposure_checks[0].state, "error");
  EXPECT_TRUE(
      absl::StrContains(exposure_checks[0].message, "required, did not run"))
      << exposure_checks[0].message;
  const std::vector<Check> plant = ChecksOf(r, "plant");
  ASSERT_EQ(plant.size(), 1u);
  EXPECT_EQ(plant[0].state, "error");
  // So a JUnit gate fails.
  const std::string junit = JunitXml(r.ToJson());
  EXPECT_TRUE(absl::StrContains(junit, "<error")) << junit;
  EXPECT_TRUE(absl::StrContains(junit, "required, did not run")) << junit;
  // Keyless facts still read: vLLM's /v1/models and /metrics are open.
  EXPECT_EQ(r.details["engine"], "vllm");
  EXPECT_EQ(r.details["context_tokens"], AdvertisedContext(fo));
  EXPECT_EQ(r.details["input_limit_tokens"], kNotRevealed);  // a window only
  EXPECT_EQ(r.details["stream_usage"], "with stream_options.include_usage");
  EXPECT_EQ(r.details["completion_without_key"], "served");
  EXPECT_TRUE(r.tenants.empty());
  ExpectValidDocument(r);
}

TEST(FactsTest, UnreachableTargetIsAnError) {
  std::string url;
  {
    FakeTarget gone(FakeTargetOptions{});
    url = gone.url();
  }
  AuditorMetrics metrics;
  const CampaignResult r = RunFacts(Options(url, {}, "gone"), &metrics);
  EXPECT_EQ(r.verdict, Verdict::kError) << Explain(r);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_TRUE(absl::StrContains(r.reasons[0], "unreachable")) << r.reasons[0];
  // The metrics mark facts' own detectors inconclusive, not probe's.
  const std::string m = metrics.Serialize();
  EXPECT_TRUE(absl::StrContains(
      m,
      R"(kvcanary_auditor_detector_state{detector="exposure",state="inconclusive"} 1)"))
      << m;
  EXPECT_FALSE(absl::StrContains(m, R"(detector="output_scan")")) << m;
  ExpectValidDocument(r);
}

// --- Each flavor's own fields (docs/targets.md) ---

TEST(FactsTest, ReadsEachFlavorsOwnFields) {
  struct Case {
    Flavor flavor;
    const char* engine;
    json version;
    bool input_limit;  // the flavor states an input limit
  };
  const Case cases[] = {{Flavor::kVllm, "vllm", kNotRevealed, false},
                        {Flavor::kSglang, "sglang", "0.5.0-fake", true},
                        {Flavor::kLlamaCpp, "llama.cpp", "b0-fake", false},
                        {Flavor::kTgi, "tgi", "3.3.0-fake", true},
                        {Flavor::kOllama, "ollama", kNotRevealed, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::FlavorName(c.flavor));
    FakeTargetOptions fo;
    fo.flavor = c.flavor;
    FakeTarget target(fo);
    AuditorMetrics metrics;
    const CampaignResult r = RunFacts(
        Options(target.url(), {{"acme", "sk-a"}, {"globex", "sk-g"}}, "flavor"),
        &metrics);
    EXPECT_EQ(r.verdict, Verdict::kClean) << Explain(r);
    EXPECT_EQ(r.details["engine"], c.engine) << Explain(r);
    EXPECT_EQ(r.details["version"], c.version);
    EXPECT_EQ(r.details["usage"], "reported");
    if (c.flavor == Flavor::kOllama) {
      // Ollama states its window nowhere a GET reads (/api/show is a POST).
      EXPECT_EQ(r.details["context_tokens"], kNotRevealed);
    } else if (c.flavor == Flavor::kTgi) {
      EXPECT_EQ(r.details["context_tokens"], AdvertisedContext(fo) + 1);
    } else {
      EXPECT_EQ(r.details["context_tokens"], AdvertisedContext(fo));
    }
    if (c.input_limit) {
      EXPECT_EQ(r.details["input_limit_tokens"], c.flavor == Flavor::kTgi
                                                     ? AdvertisedContext(fo)
                                                     : fo.limit_tokens);
    } else {
      EXPECT_EQ(r.details["input_limit_tokens"], kNotRevealed);
    }
    // TGI's /v1/completions stream always carries usage; the others only
    // with stream_options.include_usage.
    EXPECT_EQ(r.details["stream_usage"],
              c.flavor == Flavor::kTgi ? "always"
                                       : "with stream_options.include_usage");
    // Nobody but kvcanary states these.
    for (const char* f : {"kv_checksum", "watermark", "trace_format"}) {
      EXPECT_EQ(r.details[f], kNotRevealed) << f;
    }
    ExpectValidDocument(r);
  }
}

// Issue 22 (c): every key is checked before the first read; a wrong key
// for the last of four tenants stops facts with exit 2 naming it, as every
// command does.
TEST(FactsTest, AWrongKeyForTheLastOfFourTenantsIsAnErrorNamingIt) {
  FakeTargetOptions fo;
  fo.flavor = Flavor::kLlamaCpp;
  fo.api_keys = {{"sk-a", "acme"},
                 {"sk-g", "globex"},
                 {"sk-i", "initech"},
                 {"sk-u", "umbrella"}};
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r = RunFacts(Options(target.url(),
                                            {{"acme", "sk-a"},
                                             {"globex", "sk-g"},
                                             {"initech", "sk-i"},
                                             {"umbrella", "sk-WRONG"}},
                                            "wrong-last-key"),
                                    &metrics);
  EXPECT_EQ(r.verdict, Verdict::kError) << Explain(r);
  EXPECT_EQ(r.exit_code(), 2);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_TRUE(absl::StrContains(r.reasons[0], "'umbrella'")) << r.reasons[0];
}

// Issue 22 (d): --target .../v1 (the OpenAI SDKs' base_url) reads the same
// endpoints as the server's root, and a target that is not an
// OpenAI-compatible API is an error (exit 2) as for every command.
TEST(FactsTest, ABaseUrlEndingInV1ReadsTheServersRoot) {
  FakeTargetOptions fo;
  fo.flavor = Flavor::kLlamaCpp;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunFacts(Options(target.url() + "/v1",
                       {{"acme", "sk-a"}, {"globex", "sk-g"}}, "v1"),
               &metrics);
  EXPECT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.target, target.url());
  EXPECT_EQ(r.details["engine"], "llama.cpp");  // from /props, at the root
  EXPECT_EQ(r.details["context_tokens"], AdvertisedContext(fo));
  // A path that is not an OpenAI API: no model list there.
  const CampaignResult bad = RunFacts(
      Options(target.url() + "/nothing", {{"acme", "sk-a"}}, "not-openai"),
      &metrics);
  EXPECT_EQ(bad.verdict, Verdict::kError) << Explain(bad);
  EXPECT_EQ(bad.exit_code(), 2);
}

// --- The pieces ---

TEST(FactsTableTest, FirstSourceWinsAgreeingOnesAreAlsoAndOthersConflict) {
  FactsTable t;
  EXPECT_EQ(t.Value("engine"), kNotRevealed);
  t.Add("engine", "vllm", "GET /v1/models .data[].owned_by");
  t.Add("engine", "vllm", "GET /metrics metric names (vllm:*)");
  t.Add("engine", "sglang", "header Server");
  EXPECT_EQ(t.Value("engine"), "vllm");
  EXPECT_EQ(t.revealed(), 1);
  const json s = t.Sources();
  EXPECT_EQ(s["engine"]["source"], "GET /v1/models .data[].owned_by");
  EXPECT_EQ(s["engine"]["also"],
            json::array({"GET /metrics metric names (vllm:*)"}));
  EXPECT_EQ(s["engine"]["conflicts"][0]["value"], "sglang");
  EXPECT_EQ(s["version"]["value"], kNotRevealed);
}

EndpointRead Read(const std::string& path, const std::string& body,
                  std::map<std::string, std::string> headers = {}) {
  EndpointRead r;
  r.spec = {"http://t", path, kNoKeyReader, ""};
  r.status = 200;
  r.body = body;
  r.headers = std::move(headers);
  return r;
}

TEST(FactsFieldsTest, TrainingContextsAndOtherServersNamesAreNeverTaken) {
  FactsTable t;
  // llama.cpp's /v1/models meta holds the training context only.
  ReadEndpointFacts(
      Read(
          "/v1/models",
          R"({"data":[{"id":"m","owned_by":"me","meta":{"n_ctx_train":4096}}]})",
          {{"server", "uvicorn"}}),
      "m", &t);
  // SGLang's context_length is null unless --context-length was given.
  ReadEndpointFacts(Read("/get_server_info", R"({"context_length":null})"), "",
                    &t);
  EXPECT_EQ(t.revealed(), 0) << t.Sources().dump(2);
}

TEST(FactsFieldsTest, ServerHeaderNamesKvcanaryAndItsVersion) {
  FactsTable t;
  ReadServerHeader({{"server", "uvicorn"}}, &t);  // no inference server
  EXPECT_EQ(t.revealed(), 0);
  ReadServerHeader({{"server", "kvcanary/0.1.0"}}, &t);
  EXPECT_EQ(t.Value("engine"), "kvcanary");
  EXPECT_EQ(t.Value("version"), "0.1.0");
  EXPECT_EQ(t.Sources()["engine"]["source"], "header Server");
}

TEST(FactsFieldsTest, ReadersShownDifferentValuesAreAConflict) {
  FactsTable t;
  EndpointRead keyless = Read("/version", R"({"version":"1.0"})");
  EndpointRead acme = Read("/version", R"({"version":"2.0"})");
  acme.spec.reader = "acme";
  ReadEndpointFacts(keyless, "", &t);
  ReadEndpointFacts(acme, "", &t);
  const json s = t.Sources()["version"];
  EXPECT_EQ(s["value"], "1.0");
  EXPECT_EQ(s["source"], "GET /version .version as (no key)");
  ASSERT_EQ(s["conflicts"].size(), 1u) << s.dump(2);
  EXPECT_EQ(s["conflicts"][0]["source"], "GET /version .version as acme");
  EXPECT_EQ(s["conflicts"][0]["value"], "2.0");
}

TEST(FactsFieldsTest, KeylessCompletionIsServedOrRefused) {
  Completion served;
  served.status = 200;
  served.usable = true;
  Completion refused;
  refused.status = 401;
  Completion failed;
  failed.status = 503;
  FactsTable t;
  ReadKeylessCompletion("POST /v1/completions", kPlainCompletion, failed, &t);
  EXPECT_EQ(t.Value("completion_without_key"), kNotRevealed);
  ReadKeylessCompletion("POST /v1/completions", kPlainCompletion, refused, &t);
  EXPECT_EQ(t.Value("completion_without_key"), "refused");
  FactsTable u;
  ReadKeylessCompletion("POST /v1/completions", kPlainCompletion, served, &u);
  EXPECT_EQ(u.Value("completion_without_key"), "served");
}

TEST(FactsFieldsTest, NodeRolesStateDisaggregation) {
  std::vector<EndpointRead> reads = {
      Read("/health", R"({"status":"ok","role":"prefill"})"),
      Read("/health", R"({"status":"ok","role":"decode"})")};
  for (EndpointRead& r : reads) r.spec.node = true;
  FactsTable t;
  ReadNodeRoles(reads, &t);
  EXPECT_EQ(t.Value("disaggregated"), true);
  FactsTable one;
  reads.pop_back();
  ReadNodeRoles(reads, &one);
  EXPECT_EQ(one.Value("disaggregated"), kNotRevealed);
}

TEST(FactsExposureTest, HalfAMarkerIsFoundAndLessIsNot) {
  FactsPlant plant;
  plant.writer = "acme";
  plant.marker = canaries::DeriveMarker(kKey, "acme", "c1", 0);
  plant.response_id = "cmpl-12";
  canaries::MarkerScanner scanner(kExposureMinWords);
  scanner.Add(plant.marker, "acme");
  ASSERT_TRUE(scanner.Compile().ok());
  auto words = [&](int n) {
    std::vector<std::string> w;
    for (int i = 0; i < n; ++i) {
      w.push_back(canaries::MarkerWordList()[plant.marker.words[i]]);
    }
    return absl::StrJoin(w, " ");
  };
  EXPECT_TRUE(absl::StrContains(PlantPrompt(plant.marker), plant.marker.text));
  auto whole = FindPlant(
      scanner, plant,
      Read("/slots",
           json::array({{{"prompt", PlantPrompt(plant.marker)}}}).dump()));
  ASSERT_TRUE(whole.has_value());
  EXPECT_TRUE(whole->exact);
  EXPECT_EQ(whole->kind, "prompt_exposed");
  auto half = FindPlant(scanner, plant,
                        Read("/slots", "{\"prompt\":\"" + words(8) + "\"}"));
  ASSERT_TRUE(half.has_value());
  EXPECT_EQ(half->words_matched, 8);
  EXPECT_FALSE(
      FindPlant(scanner, plant, Read("/slots", "{\"p\":\"" + words(7) + "\"}"))
          .has_value());
  // The plant's response id is its request: a whole token only.
  auto id = FindPlant(scanner, plant, Read("/x", R"({"last":"cmpl-12"})"));
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(id->kind, "activity_exposed");
  EXPECT_FALSE(FindPlant(scanner, plant, Read("/x", R"({"last":"cmpl-123"})"))
                   .has_value());
}

}  // namespace
}  // namespace kvcanary::auditor
