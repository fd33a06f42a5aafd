// Attacks on an export bundle after it was signed, each checked by
// `kvcanary-auditor verify-bundle` as a reviewer runs it: entries added
// beside the manifest's files that a reader could be pointed at — a link to
// a directory holding a fake report, an empty directory, a link to a file
// outside the bundle, a dangling link, a FIFO. A bundle is exactly its
// manifest (docs/bundles.md): each fails, named by its own path in the
// bundle (never the link's target), and nothing is followed or opened.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "gtest/gtest.h"
#include "tests/integration/auditor_cli.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

namespace fs = std::filesystem;

// A real bundle: a small probe campaign against a clean cluster, exported
// and signed. Built once per test process.
struct Signed {
  std::string bundle;  // the untouched bundle directory
  std::string pubkey;
  std::string error;  // why it could not be built; "" if it was
};

const Signed& SignedBundle() {
  static const Signed* built = [] {
    auto* s = new Signed;
    Cluster cluster({});
    if (!cluster.ok()) {
      s->error = "kvcanary-engine up did not start";
      return s;
    }
    const std::string db = TempPath("tamper.db");
    const std::string key = TempPath("tamper.pem");
    s->bundle = TempPath("bundle");
    s->pubkey = key + ".pub";
    const CliRun probe = Auditor(ProbeArgs(cluster, db, 40));
    const CliRun keygen = Auditor({"keygen", "--out=" + key});
    const CliRun exported =
        Auditor({"export", "--db=" + db, "--since=2020-01-01T00:00:00Z",
                 "--key=" + key, "--out=" + s->bundle});
    if (exported.exit_code != 0) {
      s->error = probe.out + keygen.out + exported.out;
    }
    return s;
  }();
  return *built;
}

// A copy of the signed bundle with `tamper` applied to it, checked.
CliRun VerifyTampered(const std::string& name,
                      const std::function<void(const std::string&)>& tamper) {
  const std::string dir = TempPath(name);
  fs::copy(SignedBundle().bundle, dir, fs::copy_options::recursive);
  tamper(dir);
  return Auditor({"verify-bundle", dir, "--pubkey=" + SignedBundle().pubkey});
}

// Fails naming `entry` (its path in the bundle) and never `target`.
void ExpectFailsNaming(const CliRun& run, const std::string& entry,
                       const std::string& target = "") {
  EXPECT_EQ(run.exit_code, 1) << run.out;
  EXPECT_NE(run.out.find("  " + entry + ": "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("VERIFICATION FAILED"), std::string::npos) << run.out;
  if (!target.empty()) {
    EXPECT_EQ(run.out.find(target), std::string::npos) << run.out;
  }
}

class BundleTamperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(SignedBundle().error.empty()) << SignedBundle().error;
  }
};

TEST_F(BundleTamperTest, UntouchedBundleVerifies) {
  const CliRun run = VerifyTampered("untouched", [](const std::string&) {});
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find("verified"), std::string::npos) << run.out;
}

TEST_F(BundleTamperTest, SymlinkedDirectoryWithAFakeReportFails) {
  const std::string fake = TempPath("fake-reports");
  fs::create_directories(fake);
  std::ofstream(fake + "/report.json") << "{\"verdict\": \"clean\"}\n";
  const CliRun run = VerifyTampered("linked-dir", [&](const std::string& d) {
    fs::create_directory_symlink(fake, d + "/reports");
  });
  ExpectFailsNaming(run, "reports", fake);
  EXPECT_EQ(run.out.find("report.json"), std::string::npos) << run.out;
}

TEST_F(BundleTamperTest, EmptyDirectoryFails) {
  const CliRun run = VerifyTampered("empty-dir", [](const std::string& d) {
    fs::create_directories(d + "/answers/later");
  });
  ExpectFailsNaming(run, "answers/later/");
}

TEST_F(BundleTamperTest, SymlinkToAFileOutsideFailsNamedByTheLink) {
  const CliRun run = VerifyTampered("linked-file", [](const std::string& d) {
    fs::create_symlink("../../../../etc/hostname", d + "/campaigns/host.json");
  });
  ExpectFailsNaming(run, "campaigns/host.json", "etc/hostname");
}

TEST_F(BundleTamperTest, DanglingSymlinkFails) {
  const CliRun run = VerifyTampered("dangling", [](const std::string& d) {
    fs::create_symlink("no/such/file", d + "/index2.html");
  });
  ExpectFailsNaming(run, "index2.html", "no/such/file");
}

TEST_F(BundleTamperTest, FifoFailsWithoutBeingOpened) {
  // Opening a FIFO with no writer would block: the check must not.
  const CliRun run = VerifyTampered("fifo", [](const std::string& d) {
    ASSERT_EQ(mkfifo((d + "/oscal/pipe.json").c_str(), 0644), 0);
  });
  ExpectFailsNaming(run, "oscal/pipe.json");
}

}  // namespace
}  // namespace kvcanary::testing
