// The verifiable log through the CLI, against evidence a real campaign
// wrote: keygen (and OpenSSL's own keys), checkpoint, prove, verify
// against checkpoints after the tail is cut, and the sidecar signing a
// checkpoint into two directories after every campaign.
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "storage/sqlite_db.h"
#include "tests/integration/auditor_cli.h"
#include "tests/integration/cluster.h"
#include "tests/shared_files.h"

namespace kvcanary::testing {
namespace {

namespace fs = std::filesystem;

// A small campaign's evidence against a clean cluster.
std::string CampaignDb(const std::string& name) {
  Cluster cluster({});
  EXPECT_TRUE(cluster.ok());
  const std::string db = TempPath(name);
  CliRun probe = Auditor(ProbeArgs(cluster, db, 40));
  // Few probes: inconclusive (floors unmet) or clean; rows either way.
  EXPECT_TRUE(probe.exit_code == 0 || probe.exit_code == 3) << probe.out;
  return db;
}

int CheckpointFiles(const std::string& dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    n += e.path().filename().string().rfind("checkpoint-", 0) == 0;
  }
  return n;
}

TEST(TlogCliTest, CheckpointProveAndVerifyFindACutTail) {
  const std::string db = CampaignDb("tlog.db");
  const std::string key = TempPath("key.pem");
  const std::string dir = TempPath("checkpoints");
  CliRun keygen = Auditor({"keygen", "--out=" + key});
  ASSERT_EQ(keygen.exit_code, 0) << keygen.out;
  // A key is never replaced without --force.
  EXPECT_EQ(Auditor({"keygen", "--out=" + key}).exit_code, 2);
  CliRun cp = Auditor({"checkpoint", "--db=" + db, "--key=" + key,
                       "--origin=kvcanary/test", "--checkpoint-dir=" + dir});
  ASSERT_EQ(cp.exit_code, 0) << cp.out;
  EXPECT_EQ(CheckpointFiles(dir), 1);

  CliRun inclusion = Auditor({"prove", "--db=" + db, "--row=3"});
  ASSERT_EQ(inclusion.exit_code, 0) << inclusion.out;
  const nlohmann::json proof = nlohmann::json::parse(inclusion.out);
  EXPECT_EQ(proof["type"], "inclusion");
  EXPECT_EQ(proof["leaf_index"], 2);
  EXPECT_FALSE(proof["proof"].empty());
  CliRun consistency =
      Auditor({"prove", "--db=" + db, "--from-size=2", "--to-size=10"});
  ASSERT_EQ(consistency.exit_code, 0) << consistency.out;
  EXPECT_EQ(nlohmann::json::parse(consistency.out)["type"], "consistency");
  EXPECT_EQ(Auditor({"prove", "--db=" + db}).exit_code, 2);

  CliRun ok = Auditor({"verify", "--db=" + db, "--checkpoint=" + dir,
                       "--pubkey=" + key + ".pub"});
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_NE(ok.out.find("intact"), std::string::npos) << ok.out;

  // Cut the tail (past the append-only triggers, as anyone with the file
  // can): the chain alone still holds; the checkpoint does not.
  {
    auto sql = SqliteDb::Open(db);
    ASSERT_TRUE(sql.ok()) << sql.status();
    ASSERT_TRUE((*sql)->Exec("DROP TRIGGER evidence_no_delete").ok());
    ASSERT_TRUE((*sql)
                    ->Exec("DELETE FROM evidence WHERE seq > "
                           "(SELECT MAX(seq) - 5 FROM evidence)")
                    .ok());
  }
  CliRun chain_only = Auditor({"verify", "--db=" + db});
  EXPECT_EQ(chain_only.exit_code, 0) << chain_only.out;
  EXPECT_NE(chain_only.out.find("a cut tail or a re-hashed chain is not"),
            std::string::npos)
      << chain_only.out;
  CliRun cut = Auditor({"verify", "--db=" + db, "--checkpoint=" + dir,
                        "--pubkey=" + key + ".pub"});
  EXPECT_EQ(cut.exit_code, 1) << cut.out;
  EXPECT_NE(cut.out.find("truncated"), std::string::npos) << cut.out;
  EXPECT_NE(cut.out.find("5 rows missing"), std::string::npos) << cut.out;
  // The campaign lost its end with the tail: named interrupted.
  EXPECT_NE(cut.out.find("interrupted"), std::string::npos) << cut.out;

  // Another key's public half proves nothing.
  const std::string other = TempPath("other.pem");
  ASSERT_EQ(Auditor({"keygen", "--out=" + other}).exit_code, 0);
  CliRun wrong = Auditor({"verify", "--db=" + db, "--checkpoint=" + dir,
                          "--pubkey=" + other + ".pub"});
  EXPECT_EQ(wrong.exit_code, 1) << wrong.out;
}

// export and verify-bundle as a reviewer runs them: the bundle carries
// OSCAL that NIST's schema accepts, answer sheets and the bundle view, and
// one changed byte anywhere fails it, naming the file.
TEST(TlogCliTest, ExportedBundleVerifiesOfflineAndAnEditFailsIt) {
  const std::string db = CampaignDb("export.db");
  const std::string key = TempPath("export.pem");
  const std::string out = TempPath("bundle");
  ASSERT_EQ(Auditor({"keygen", "--out=" + key}).exit_code, 0);
  EXPECT_EQ(Auditor({"export", "--db=" + db, "--since=yesterday",
                     "--key=" + key, "--out=" + out})
                .exit_code,
            2);
  CliRun exported =
      Auditor({"export", "--db=" + db, "--since=2020-01-01T00:00:00Z",
               "--key=" + key, "--out=" + out});
  ASSERT_EQ(exported.exit_code, 0) << exported.out;
  for (const char* f : {"oscal/assessment-results.json", "index.html",
                        "answers/ccm-ivs-06.csv", "answers/aicm-is-06.md"}) {
    EXPECT_TRUE(fs::exists(out + "/" + f)) << f << "\n" << exported.out;
  }
  CliRun ok = Auditor({"verify-bundle", out, "--pubkey=" + key + ".pub"});
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  const std::string schemas = shared_files::Path("schemas");
  if (shared_files::Have({"schemas/validate.py",
                          "schemas/oscal_assessment-results_schema-1.1.2.json"},
                         "the bundle's OSCAL document against NIST's schema") &&
      std::system("python3 -c 'import jsonschema, regex' 2>/dev/null") == 0) {
    EXPECT_EQ(std::system(("python3 '" + schemas + "/validate.py' '" + schemas +
                           "/oscal_assessment-results_schema-1.1.2.json' '" +
                           out + "/oscal/assessment-results.json'")
                              .c_str()),
              0);
  } else {
    std::printf(
        "OSCAL schema check skipped: no ../shared/schemas or no "
        "python3-jsonschema/python3-regex\n");
  }
  {
    std::fstream f(out + "/index.html",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('#');
  }
  CliRun bad = Auditor({"verify-bundle", out, "--pubkey=" + key + ".pub"});
  EXPECT_EQ(bad.exit_code, 1) << bad.out;
  EXPECT_NE(bad.out.find("index.html"), std::string::npos) << bad.out;
}

TEST(TlogCliTest, OpensslKeysSignCheckpointsToo) {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "openssl is not installed";
  }
  const std::string db = CampaignDb("tlog-openssl.db");
  const std::string key = TempPath("openssl.pem");
  const std::string dir = TempPath("checkpoints-openssl");
  ASSERT_EQ(std::system(("openssl genpkey -algorithm ed25519 -out '" + key +
                         "' && openssl pkey -in '" + key + "' -pubout -out '" +
                         key + ".pub'")
                            .c_str()),
            0);
  CliRun cp = Auditor(
      {"checkpoint", "--db=" + db, "--key=" + key, "--checkpoint-dir=" + dir});
  ASSERT_EQ(cp.exit_code, 0) << cp.out;
  CliRun ok = Auditor({"verify", "--db=" + db, "--checkpoint=" + dir,
                       "--pubkey=" + key + ".pub"});
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
}

TEST(TlogCliTest, SidecarSignsACheckpointIntoBothDirectoriesAfterACampaign) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  const std::string key = TempPath("sidecar.pem");
  ASSERT_EQ(Auditor({"keygen", "--out=" + key}).exit_code, 0);
  const std::string dir = TempPath("sidecar-checkpoints");
  const std::string mirror = TempPath("sidecar-mirror");
  const std::string db = TempPath("sidecar-tlog.db");
  Process sidecar(
      {"sidecar", "--target=" + cluster.router(),
       "--tenants=" + WriteTenantsFile(), "--db=" + db, "--interval=1",
       "--metrics-port=0", "--quiet", "--max-probes=30", "--key=" + key,
       "--checkpoint-dir=" + dir, "--checkpoint-mirror=" + mirror},
      AuditorBinary());
  ASSERT_FALSE(SidecarTarget(sidecar).empty());
  for (int i = 0;
       i < 600 && (CheckpointFiles(dir) < 1 || CheckpointFiles(mirror) < 1);
       ++i) {
    usleep(100 * 1000);
  }
  sidecar.Signal(SIGTERM);
  EXPECT_EQ(sidecar.Wait(), 0);
  EXPECT_GE(CheckpointFiles(dir), 1);
  EXPECT_GE(CheckpointFiles(mirror), 1);
  for (const std::string& d : {dir, mirror}) {
    CliRun v = Auditor({"verify", "--db=" + db, "--checkpoint=" + d,
                        "--pubkey=" + key + ".pub"});
    EXPECT_EQ(v.exit_code, 0) << d << "\n" << v.out;
  }
  // --checkpoint-dir without a key is refused before anything runs.
  CliRun no_key = Auditor({"sidecar", "--target=" + cluster.router(),
                           "--tenants=" + WriteTenantsFile(), "--db=" + db,
                           "--checkpoint-dir=" + dir});
  EXPECT_EQ(no_key.exit_code, 2) << no_key.out;
}

}  // namespace
}  // namespace kvcanary::testing
