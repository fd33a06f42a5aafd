// `verify` of the files a killed writer left, as a reviewer is handed them:
// the .db and its -wal (no -shm), read-only, in a read-only directory. The
// rows committed to the WAL are verified through a private copy and nothing
// is written beside the reviewer's files; the .db alone names the -wal to
// copy beside it instead of calling the log intact.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "auditor/evidence/commands.h"
#include "auditor/evidence/log.h"
#include "gtest/gtest.h"
#include "tests/temp_path.h"

namespace kvcanary::auditor {
namespace {

namespace fs = std::filesystem;

constexpr int kRows = 25;  // campaign_start and 24 probes, all committed

// Forks a writer that commits kRows rows to `db` (each durable: flushed),
// tells the parent, and waits; the parent kills it with SIGKILL. True if
// the writer reported its rows and died of the signal.
bool KillWriterAfterCommit(const std::string& db) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    close(fds[0]);
    auto log = EvidenceLog::Open(db, "c20261205T063000-0badc0de");
    if (!log.ok()) _exit(2);
    if (!(*log)->Record("campaign_start", {{"command", "probe"}}).ok()) {
      _exit(3);
    }
    for (int i = 1; i < kRows; ++i) {
      if (!(*log)->Record("probe", {{"probe", i}}).ok()) _exit(3);
    }
    if (!(*log)->Flush().ok()) _exit(4);
    const char done = 'y';
    if (write(fds[1], &done, 1) != 1) _exit(5);
    pause();  // killed here, its connection still open
    _exit(0);
  }
  close(fds[1]);
  char done = 0;
  const bool committed = read(fds[0], &done, 1) == 1 && done == 'y';
  close(fds[0]);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  return committed && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

std::set<std::string> Listing(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

struct VerifyRun {
  int exit_code;
  std::string out;  // stdout, then stderr
};

VerifyRun RunVerify(const std::string& db) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int rc = VerifyCommand({db, "", ""});
  std::string out = ::testing::internal::GetCapturedStdout();
  out += ::testing::internal::GetCapturedStderr();
  return {rc, out};
}

// A directory holding copies of `files` from `from_dir`, files 0444 and
// the directory 0555; its permissions are restored when destroyed.
class ReadOnlyCopy {
 public:
  ReadOnlyCopy(const std::string& name, const std::string& from_dir,
               std::initializer_list<std::string> files)
      : dir_(testing_paths::UniqueTempPath("kvcanary-handed", name)) {
    fs::create_directories(dir_);
    for (const std::string& f : files) {
      fs::copy_file(from_dir + "/" + f, dir_ + "/" + f);
      chmod((dir_ + "/" + f).c_str(), 0444);
    }
    chmod(dir_.c_str(), 0555);
  }
  ~ReadOnlyCopy() {
    chmod(dir_.c_str(), 0755);
    for (const auto& e : fs::directory_iterator(dir_)) {
      chmod(e.path().c_str(), 0644);
    }
    fs::remove_all(dir_);
  }
  const std::string& dir() const { return dir_; }

 private:
  const std::string dir_;
};

TEST(KilledWriterTest, ReadOnlyCopyOfDbAndWalVerifiesTheRowsInTheWal) {
  const std::string writer_dir =
      testing_paths::UniqueTempPath("kvcanary-writer", "dir");
  fs::create_directories(writer_dir);
  ASSERT_TRUE(KillWriterAfterCommit(writer_dir + "/evidence.db"));
  // Killed before any checkpoint: the rows are in the WAL only.
  ASSERT_TRUE(fs::exists(writer_dir + "/evidence.db-wal"));

  const ReadOnlyCopy handed("pair", writer_dir,
                            {"evidence.db", "evidence.db-wal"});
  const std::set<std::string> before = Listing(handed.dir());
  const VerifyRun run = RunVerify(handed.dir() + "/evidence.db");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find(
                absl::StrCat("hash chain intact, ", kRows, " rows verified")),
            std::string::npos)
      << run.out;
  // The campaign never ended and no writer holds the copy.
  EXPECT_NE(run.out.find("interrupted"), std::string::npos) << run.out;
  EXPECT_EQ(Listing(handed.dir()), before) << "verify wrote beside the files";
  fs::remove_all(writer_dir);
}

TEST(KilledWriterTest, DbWithoutItsWalNamesTheWalToCopyAndIsNotIntact) {
  const std::string writer_dir =
      testing_paths::UniqueTempPath("kvcanary-writer", "dir");
  fs::create_directories(writer_dir);
  ASSERT_TRUE(KillWriterAfterCommit(writer_dir + "/evidence.db"));

  const ReadOnlyCopy handed("db-only", writer_dir, {"evidence.db"});
  const std::set<std::string> before = Listing(handed.dir());
  const std::string db = handed.dir() + "/evidence.db";
  const VerifyRun run = RunVerify(db);
  EXPECT_EQ(run.exit_code, 2) << run.out;
  EXPECT_NE(run.out.find("copy " + db + "-wal"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("missing"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("intact"), std::string::npos) << run.out;
  EXPECT_EQ(Listing(handed.dir()), before) << "verify wrote beside the file";
  fs::remove_all(writer_dir);
}

}  // namespace
}  // namespace kvcanary::auditor
