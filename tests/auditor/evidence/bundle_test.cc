#include "auditor/evidence/bundle.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "auditor/evidence/bundle_format.h"
#include "auditor/evidence/bundle_verify.h"
#include "auditor/result/coverage.h"
#include "auditor/result/finding.h"
#include "auditor/result/incidents.h"
#include "common/file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/ed25519_key.h"
#include "storage/evidence_store.h"

namespace kvcanary::auditor {
namespace {

using ::nlohmann::json;
using storage::EvidenceRecord;

constexpr int64_t kT0 = 1764756900000000;  // 2025-12-03T10:15:00Z
const char* const kWithFindings = "c20251203T101500-1a2b3c4d";
const char* const kClean = "c20251203T111500-5e6f7a8b";

std::string FreshDir(const std::string& name) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/bundle_test_", getpid(), "_", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

EvidenceRecord Rec(const std::string& kind, const std::string& campaign,
                   int64_t ts_us, json body) {
  return {kind, campaign, ts_us, std::move(body)};
}

json Coverage(int findings) {
  DetectorCoverage d;
  d.name = "trace";
  d.unit = "pages read";
  d.coverage = {{"acme", 31}, {"globex", 33}};
  d.findings = findings;
  d.Judge({"acme", "globex"});
  return json::array({d.ToJson()});
}

// A probe campaign with two trace findings grouped into incidents.
std::vector<EvidenceRecord> CampaignWithFindings(int64_t t) {
  const std::string c = kWithFindings;
  std::vector<EvidenceRecord> out{Rec("campaign_start", c, t,
                                      {{"command", "probe"},
                                       {"target", "http://127.0.0.1:8080"},
                                       {"tenants", {"acme", "globex"}},
                                       {"floors", {{"trace", 20}}},
                                       {"key_sha256", std::string(64, 'a')}})};
  std::vector<Finding> findings;
  for (int i = 0; i < 2; ++i) {
    Finding f;
    f.kind = "trace_foreign_tenant_read";
    f.severity = Severity::kCritical;
    f.detector = "trace";
    f.ts_us = t + 1000 + i;
    f.reader = "globex";
    f.writer = "acme";
    f.engine_request = 40 + i;
    f.group = {{"node", "decode"}};
    f.detail = {{"page", 7 + i}};
    findings.push_back(f);
  }
  for (int i = 0; i < 6; ++i) {
    out.push_back(Rec("probe", c, t + 100 + i,
                      {{"probe", i}, {"tenant", i % 2 ? "acme" : "globex"}}));
  }
  for (const Finding& f : findings) {
    out.push_back(Rec("finding", c, f.ts_us, f.ToJson()));
  }
  const std::vector<Incident> incidents = GroupIncidents(c, findings);
  for (const Incident& i : incidents) {
    out.push_back(Rec("incident", c, t + 2000, i.ToJson()));
  }
  out.push_back(Rec("campaign_end", c, t + 3000,
                    {{"command", "probe"},
                     {"verdict", "findings"},
                     {"result", "findings"},
                     {"exit_code", 1},
                     {"reasons", {"2 critical trace findings"}},
                     {"detectors", Coverage(2)},
                     {"findings", 2},
                     {"incidents", incidents.size()},
                     {"elapsed_ms", 3.0}}));
  return out;
}

// A clean facts campaign with a provider facts table.
std::vector<EvidenceRecord> CleanFactsCampaign(int64_t t) {
  const std::string c = kClean;
  return {
      Rec("campaign_start", c, t,
          {{"command", "facts"},
           {"target", "http://127.0.0.1:8081"},
           {"tenants", {"acme", "globex"}}}),
      Rec("facts_read", c, t + 1, {{"path", "/v1/models"}, {"status", 200}}),
      Rec("facts_read", c, t + 2, {{"path", "/version"}, {"status", 200}}),
      Rec("facts_table", c, t + 3,
          {{"prefix_cache",
            {{"value", "per_tenant"}, {"source", "/version"}}}}),
      Rec("campaign_end", c, t + 4,
          {{"command", "facts"},
           {"verdict", "clean"},
           {"result", "clean"},
           {"exit_code", 0},
           {"reasons", json::array()},
           {"detectors", Coverage(0)},
           {"findings", 0},
           {"incidents", 0},
           {"elapsed_ms", 4.0}}),
  };
}

struct Fixture {
  std::string dir, db, key_path, pub_path;
  storage::Ed25519Key key = *storage::Ed25519Key::Generate();
  storage::Ed25519Key pub = *storage::Ed25519Key::FromPem(key.PublicPem());
};

Fixture MakeLog(const std::string& name) {
  Fixture f;
  f.dir = FreshDir(name);
  f.db = f.dir + "/evidence.db";
  f.key_path = f.dir + "/key.pem";
  f.pub_path = f.dir + "/key.pem.pub";
  EXPECT_TRUE(WriteFileAtomically(f.key_path, f.key.PrivatePem(), 0600).ok());
  EXPECT_TRUE(WriteFileAtomically(f.pub_path, f.key.PublicPem(), 0644).ok());
  auto store = storage::EvidenceStore::Open(f.db);
  EXPECT_TRUE(store.ok()) << store.status();
  // An earlier campaign outside both windows, then the two.
  auto early = CampaignWithFindings(kT0 - 86400000000);
  for (auto& r : early) r.campaign = "c20251202T101500-00000000";
  EXPECT_TRUE((*store)->Append(early).ok());
  EXPECT_TRUE((*store)->Append(CampaignWithFindings(kT0)).ok());
  EXPECT_TRUE((*store)->Append(CleanFactsCampaign(kT0 + 3600000000)).ok());
  return f;
}

ExportOptions Options(const Fixture& f, const std::string& out, int64_t since,
                      int64_t until) {
  ExportOptions o;
  o.db = f.db;
  o.since_us = since;
  o.until_us = until;
  o.key = f.key_path;
  o.origin = "kvcanary/bundle-test";
  o.out_dir = out;
  return o;
}

// Flips ~64 spread bytes of every file, one at a time; each must fail
// verification, reported first at that file.
void ExpectEveryFlipFails(const std::string& out,
                          const storage::Ed25519Key& pub) {
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::recursive_directory_iterator(out)) {
    if (e.is_regular_file()) {
      paths.push_back(
          std::filesystem::relative(e.path(), out).generic_string());
    }
  }
  ASSERT_GE(paths.size(), 7u);
  for (const std::string& rel : paths) {
    const std::string path = out + "/" + rel;
    const std::string original = *ReadFile(path);
    ASSERT_FALSE(original.empty()) << rel;
    const size_t flips = std::min<size_t>(64, original.size());
    for (size_t i = 0; i < flips; ++i) {
      const size_t pos = i * original.size() / flips;
      std::string edited = original;
      edited[pos] = static_cast<char>(edited[pos] ^ 0x01);
      { std::ofstream(path, std::ios::binary | std::ios::trunc) << edited; }
      auto r = CheckBundle(out, pub);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_FALSE(r->ok) << rel << " byte " << pos << " passed";
      EXPECT_EQ(r->problems[0].file, rel)
          << "byte " << pos << ": " << r->problems[0].Line();
    }
    { std::ofstream(path, std::ios::binary | std::ios::trunc) << original; }
  }
  auto r = CheckBundle(out, pub);
  ASSERT_TRUE(r.ok() && r->ok);
}

TEST(BundleTest, ParsesRfc3339) {
  EXPECT_EQ(*ParseRfc3339Us("2025-12-03T10:15:00Z"), kT0);
  EXPECT_EQ(*ParseRfc3339Us("2025-12-03T11:15:00.5+01:00"), kT0 + 500000);
  EXPECT_FALSE(ParseRfc3339Us("yesterday").ok());
}

TEST(BundleTest, BothBundlesVerifyAndEveryFlippedByteFails) {
  Fixture f = MakeLog("flips");
  const std::string findings_out = f.dir + "/with-findings";
  ExportOptions o = Options(f, findings_out, kT0 - 1, kT0 + 1000);
  o.extra_files = {{"oscal/assessment-results.json", "{\"x\": 1}\n"},
                   {"answers/ivs-06.md", "# IVS-06\n\nSee campaigns/.\n"}};
  auto b = WriteBundle(o, f.key);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->evidence.campaigns.size(), 1u);
  EXPECT_EQ(b->evidence.campaigns[0]["verdict"], "findings");
  EXPECT_EQ(b->evidence.campaigns[0]["incidents"].size(), 1u);
  EXPECT_EQ(b->header.tree_size, 11u + 11u + 5u);

  const std::string clean_out = f.dir + "/clean";
  auto c = WriteBundle(Options(f, clean_out, kT0 + 1000, 0), f.key);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->evidence.campaigns.size(), 1u);
  EXPECT_EQ(c->evidence.campaigns[0]["verdict"], "clean");
  ASSERT_EQ(c->evidence.facts_paths,
            std::vector<std::string>{FactsPath(kClean)});

  for (const std::string& out : {findings_out, clean_out}) {
    auto r = CheckBundle(out, f.pub);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->ok) << (r->problems.empty() ? "" : r->problems[0].Line());
    EXPECT_EQ(VerifyBundle(out, f.pub_path), 0);
  }
  ExpectEveryFlipFails(findings_out, f.pub);
  ExpectEveryFlipFails(clean_out, f.pub);
}

TEST(BundleTest, NamesTheFieldOfAnEditedCampaign) {
  Fixture f = MakeLog("field");
  const std::string out = f.dir + "/b";
  ASSERT_TRUE(WriteBundle(Options(f, out, kT0 - 1, kT0 + 1), f.key).ok());
  const std::string path = out + "/" + CampaignPath(kWithFindings);
  std::string doc = *ReadFile(path);
  // The last one: the top-level verdict (the first is /end/verdict).
  const size_t at = doc.rfind("\"verdict\": \"findings\"");
  ASSERT_NE(at, std::string::npos);
  doc.replace(at, 21, "\"verdict\": \"clean\"");
  ASSERT_TRUE(WriteFileAtomically(path, doc, 0644).ok());
  auto r = CheckBundle(out, f.pub);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->ok);
  std::vector<std::string> wheres;
  for (const BundleProblem& p : r->problems) {
    if (p.file == CampaignPath(kWithFindings)) wheres.push_back(p.where);
  }
  EXPECT_THAT(wheres, ::testing::Contains("/verdict"));
}

TEST(BundleTest, RejectsOtherKeysAndUnlistedFiles) {
  Fixture f = MakeLog("keys");
  const std::string out = f.dir + "/b";
  ASSERT_TRUE(WriteBundle(Options(f, out, kT0 - 1, kT0 + 1), f.key).ok());
  auto other = storage::Ed25519Key::Generate();
  auto r = CheckBundle(out, *other);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->problems[0].file, "manifest.sig");

  { std::ofstream(out + "/note.txt") << "trust me\n"; }
  r = CheckBundle(out, f.pub);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->ok);
  EXPECT_EQ(r->problems[0].file, "note.txt");
  EXPECT_EQ(VerifyBundle(out, f.pub_path), 1);
  EXPECT_EQ(VerifyBundle(f.dir + "/none", f.pub_path), 2);
}

TEST(BundleTest, RefusesReservedExtraPathsAndNonEmptyOutput) {
  Fixture f = MakeLog("refuse");
  ExportOptions o = Options(f, f.dir + "/b", kT0 - 1, kT0 + 1);
  o.extra_files = {{"rows/rows.jsonl", "x"}};
  EXPECT_EQ(WriteBundle(o, f.key).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.extra_files = {{"../escape", "x"}};
  EXPECT_FALSE(WriteBundle(o, f.key).ok());
  o.extra_files.clear();
  o.out_dir = f.dir;  // holds the database
  EXPECT_EQ(WriteBundle(o, f.key).status().code(),
            absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace kvcanary::auditor
