#include "storage/wal_copy.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/sqlite_db.h"

namespace kvcanary::storage {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/wal_copy_test_",
                                       getpid(), "_", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A writer that commits 30 rows and exits without closing the database,
// as a killed one does: the rows stay in `db`-wal, beside a -shm.
void WriteAndDie(const std::string& db) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto sql = SqliteDb::Open(db);
    if (!sql.ok() || !(*sql)->Exec("CREATE TABLE t(x)").ok()) _exit(2);
    for (int i = 0; i < 30; ++i) {
      if (!(*sql)->Exec(absl::StrCat("INSERT INTO t VALUES(", i, ")")).ok()) {
        _exit(3);
      }
    }
    _exit(0);  // no close: the WAL is left as it is
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(fs::exists(db + "-wal"));
}

std::set<std::string> Listing(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

TEST(WalCopyTest, WalWithoutShmIsReadThroughAPrivateCopyThatIsRemoved) {
  const std::string writer = FreshDir("writer");
  WriteAndDie(writer + "/x.db");
  const std::string handed = FreshDir("handed");
  for (const char* f : {"x.db", "x.db-wal"}) {
    fs::copy_file(writer + "/" + f, handed + "/" + f);
  }
  std::string copy_dir;
  {
    auto copy = WalCopy::For(handed + "/x.db", /*writer_active=*/false);
    ASSERT_TRUE(copy.ok()) << copy.status();
    ASSERT_TRUE((*copy)->copied());
    copy_dir = fs::path((*copy)->open_path()).parent_path().string();
    struct stat st;
    ASSERT_EQ(stat(copy_dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    SqliteOpenOptions ro;
    ro.read_only = true;
    auto db = SqliteDb::Open((*copy)->open_path(), ro);
    ASSERT_TRUE(db.ok()) << db.status();
    auto stmt = (*db)->Prepare("SELECT COUNT(*) FROM t");
    ASSERT_TRUE(stmt.ok()) << stmt.status();
    ASSERT_TRUE(*stmt->Step());
    EXPECT_EQ(stmt->ColumnInt64(0), 30);  // the rows in the WAL
    const absl::Status named = (*copy)->Rename(
        absl::NotFoundError(absl::StrCat((*copy)->open_path(), ": something")));
    EXPECT_EQ(named.message(), handed + "/x.db: something");
  }
  EXPECT_FALSE(fs::exists(copy_dir));
  EXPECT_EQ(Listing(handed), (std::set<std::string>{"x.db", "x.db-wal"}));
}

TEST(WalCopyTest, OpensInPlaceWithAShmOrAWriterOrNoWal) {
  const std::string writer = FreshDir("in-place");
  WriteAndDie(writer + "/x.db");
  auto with_shm = WalCopy::For(writer + "/x.db", false);
  ASSERT_TRUE(with_shm.ok());
  EXPECT_FALSE((*with_shm)->copied());
  EXPECT_EQ((*with_shm)->open_path(), writer + "/x.db");
  fs::remove(writer + "/x.db-shm");
  auto live = WalCopy::For(writer + "/x.db", /*writer_active=*/true);
  ASSERT_TRUE(live.ok());
  EXPECT_FALSE((*live)->copied());
}

TEST(WalCopyTest, WalMissingOnlyForAWalModeFileWithoutItsWal) {
  const std::string writer = FreshDir("missing");
  WriteAndDie(writer + "/x.db");
  EXPECT_FALSE(WalMissing(writer + "/x.db"));
  const std::string alone = FreshDir("alone");
  fs::copy_file(writer + "/x.db", alone + "/x.db");
  EXPECT_TRUE(WalMissing(alone + "/x.db"));
  EXPECT_FALSE(WalMissing(alone + "/nothing.db"));
  const std::string text = alone + "/text.db";
  FILE* f = fopen(text.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("not a database, but long enough to have a header", f);
  fclose(f);
  EXPECT_FALSE(WalMissing(text));
}

}  // namespace
}  // namespace kvcanary::storage
