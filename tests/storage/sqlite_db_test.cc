#include "storage/sqlite_db.h"

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvcanary {
namespace {

using ::testing::HasSubstr;

// A fresh path under the test temp dir, with no leftover db/-wal/-shm.
std::string FreshPath(const std::string& name) {
  const std::string path = ::testing::TempDir() + "/sqlite_db_test_" + name;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    std::filesystem::remove(path + suffix);
  }
  return path;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string QueryText(SqliteDb& db, absl::string_view sql) {
  auto stmt = db.Prepare(sql);
  EXPECT_TRUE(stmt.ok()) << stmt.status();
  if (!stmt.ok()) return "";
  auto row = stmt->Step();
  EXPECT_TRUE(row.ok() && *row) << sql;
  if (!row.ok() || !*row) return "";
  return stmt->ColumnText(0);
}

TEST(StatusFromSqliteTest, MapsCodes) {
  EXPECT_EQ(StatusFromSqlite(SQLITE_BUSY, "m").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromSqlite(SQLITE_LOCKED, "m").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromSqlite(SQLITE_CORRUPT, "m").code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(StatusFromSqlite(SQLITE_NOTADB, "m").code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(StatusFromSqlite(SQLITE_CONSTRAINT_UNIQUE, "m").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(StatusFromSqlite(SQLITE_CANTOPEN, "m", ENOENT).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(StatusFromSqlite(SQLITE_CANTOPEN, "m", EACCES).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusFromSqlite(SQLITE_FULL, "m").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(StatusFromSqlite(SQLITE_IOERR_READ, "m").code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(StatusFromSqlite(SQLITE_ERROR, "the message").message(),
            "the message");
}

TEST(SqliteDbTest, OpenCreatesFileInWalModeWithPragmas) {
  const std::string path = FreshPath("wal.db");
  auto db = SqliteDb::Open(path);
  ASSERT_TRUE(db.ok()) << db.status();
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_EQ(QueryText(**db, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(QueryText(**db, "PRAGMA synchronous"), "2");  // FULL
  EXPECT_EQ(QueryText(**db, "PRAGMA foreign_keys"), "1");
  EXPECT_EQ((*db)->path(), path);
}

TEST(SqliteDbTest, ReopenKeepsData) {
  const std::string path = FreshPath("reopen.db");
  {
    auto db = SqliteDb::Open(path);
    ASSERT_TRUE(db.ok()) << db.status();
    ASSERT_TRUE(
        (*db)
            ->Exec("CREATE TABLE t(x TEXT); INSERT INTO t VALUES('kept');")
            .ok());
  }
  auto db = SqliteDb::Open(path);
  ASSERT_TRUE(db.ok()) << db.status();
  EXPECT_EQ(QueryText(**db, "SELECT x FROM t"), "kept");
}

TEST(SqliteDbTest, StatementRoundTripsTextBlobInt64AndNull) {
  auto db = SqliteDb::Open(FreshPath("roundtrip.db"));
  ASSERT_TRUE(db.ok()) << db.status();
  ASSERT_TRUE((*db)
                  ->Exec("CREATE TABLE t(id INTEGER PRIMARY KEY, n INTEGER, s "
                         "TEXT, b BLOB)")
                  .ok());

  const std::string blob("\x00\x01\xff\x00zz", 6);  // embedded NULs
  const int64_t big = INT64_MIN + 1;
  {
    auto insert = (*db)->Prepare("INSERT INTO t(n, s, b) VALUES(?1, ?2, ?3)");
    ASSERT_TRUE(insert.ok()) << insert.status();
    ASSERT_TRUE(insert->BindInt64(1, big).ok());
    ASSERT_TRUE(insert->BindText(2, "tenant-a \xc3\xa9").ok());
    ASSERT_TRUE(insert->BindBlob(3, blob).ok());
    auto row = insert->Step();
    ASSERT_TRUE(row.ok()) << row.status();
    EXPECT_FALSE(*row);
    EXPECT_EQ((*db)->LastInsertRowId(), 1);

    insert->Reset();  // clears bindings: the second row is all NULL/empty
    ASSERT_TRUE(insert->BindText(2, "").ok());
    ASSERT_TRUE(insert->BindBlob(3, "").ok());
    ASSERT_TRUE(insert->Step().ok());
    EXPECT_EQ((*db)->LastInsertRowId(), 2);
  }

  auto select = (*db)->Prepare("SELECT n, s, b FROM t ORDER BY id");
  ASSERT_TRUE(select.ok()) << select.status();
  EXPECT_EQ(select->column_count(), 3);
  auto row = select->Step();
  ASSERT_TRUE(row.ok() && *row);
  EXPECT_EQ(select->ColumnInt64(0), big);
  EXPECT_EQ(select->ColumnText(1), "tenant-a \xc3\xa9");
  EXPECT_EQ(select->ColumnBlob(2), blob);

  row = select->Step();
  ASSERT_TRUE(row.ok() && *row);
  EXPECT_TRUE(select->ColumnIsNull(0));
  EXPECT_FALSE(select->ColumnIsNull(1));  // empty text is not NULL
  EXPECT_EQ(select->ColumnText(1), "");
  EXPECT_FALSE(select->ColumnIsNull(2));
  EXPECT_EQ(select->ColumnBlob(2), "");

  row = select->Step();
  ASSERT_TRUE(row.ok());
  EXPECT_FALSE(*row);
}

TEST(SqliteDbTest, PrepareRejectsMultipleOrNoStatements) {
  auto db = SqliteDb::Open(FreshPath("prepare.db"));
  ASSERT_TRUE(db.ok()) << db.status();
  EXPECT_EQ((*db)->Prepare("SELECT 1; SELECT 2").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*db)->Prepare("  ").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*db)->Prepare("SELECT 1;  \n").ok());
  EXPECT_EQ((*db)->Prepare("SELEKT 1").status().code(),
            absl::StatusCode::kInternal);
}

TEST(SqliteDbTest, GarbageFileIsDataLossNamingThePath) {
  const std::string path = FreshPath("garbage.db");
  std::mt19937 rng(42);
  std::string bytes(8192, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  WriteFile(path, bytes);

  auto db = SqliteDb::Open(path);
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), absl::StatusCode::kDataLoss) << db.status();
  EXPECT_THAT(db.status().message(), HasSubstr(path));
  EXPECT_THAT(db.status().message(),
              HasSubstr("not a kvcanary evidence database / file is corrupt"));
}

TEST(SqliteDbTest, TruncatedDatabaseIsDataLossNamingThePath) {
  const std::string path = FreshPath("truncated.db");
  {
    auto db = SqliteDb::Open(path);
    ASSERT_TRUE(db.ok()) << db.status();
    ASSERT_TRUE((*db)
                    ->Exec("CREATE TABLE t(id INTEGER PRIMARY KEY, s TEXT);"
                           "CREATE INDEX t_s ON t(s);")
                    .ok());
    auto insert = (*db)->Prepare("INSERT INTO t(s) VALUES(?1)");
    ASSERT_TRUE(insert.ok()) << insert.status();
    for (int i = 0; i < 2000; ++i) {
      insert->Reset();
      ASSERT_TRUE(insert->BindText(1, std::string(100, 'a' + i % 26)).ok());
      ASSERT_TRUE(insert->Step().ok());
    }
  }  // the last close checkpoints the WAL into the main file
  ASSERT_FALSE(std::filesystem::exists(path + "-wal"));
  const auto full_size = std::filesystem::file_size(path);
  ASSERT_GT(full_size, 64u * 1024);
  std::filesystem::resize_file(path, full_size / 2);

  auto db = SqliteDb::Open(path);
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), absl::StatusCode::kDataLoss) << db.status();
  EXPECT_THAT(db.status().message(), HasSubstr(path));
  EXPECT_THAT(db.status().message(), HasSubstr("file is corrupt"));
}

TEST(SqliteDbTest, MissingFileWithoutCreateIsNotFound) {
  SqliteOpenOptions options;
  options.create_if_missing = false;
  const std::string path = FreshPath("missing.db");
  auto db = SqliteDb::Open(path, options);
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), absl::StatusCode::kNotFound) << db.status();
  EXPECT_THAT(db.status().message(), HasSubstr(path));
}

TEST(SqliteDbTest, ConstraintViolationIsFailedPrecondition) {
  auto db = SqliteDb::Open(FreshPath("constraint.db"));
  ASSERT_TRUE(db.ok()) << db.status();
  ASSERT_TRUE((*db)
                  ->Exec("CREATE TABLE parent(id INTEGER PRIMARY KEY);"
                         "CREATE TABLE child(p INTEGER REFERENCES parent(id));"
                         "INSERT INTO parent VALUES(1);")
                  .ok());

  absl::Status unique = (*db)->Exec("INSERT INTO parent VALUES(1)");
  EXPECT_EQ(unique.code(), absl::StatusCode::kFailedPrecondition) << unique;
  EXPECT_THAT(unique.message(), HasSubstr("UNIQUE"));

  // foreign_keys=ON is in force: a dangling reference is refused.
  auto insert = (*db)->Prepare("INSERT INTO child VALUES(?1)");
  ASSERT_TRUE(insert.ok()) << insert.status();
  ASSERT_TRUE(insert->BindInt64(1, 99).ok());
  auto step = insert->Step();
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition)
      << step.status();
  EXPECT_THAT(step.status().message(), HasSubstr("FOREIGN KEY"));
}

TEST(SqliteDbTest, WriterLockHeldElsewhereIsUnavailable) {
  const std::string path = FreshPath("busy.db");
  SqliteOpenOptions no_wait;
  no_wait.busy_timeout = absl::ZeroDuration();
  auto holder = SqliteDb::Open(path, no_wait);
  ASSERT_TRUE(holder.ok()) << holder.status();
  auto other = SqliteDb::Open(path, no_wait);
  ASSERT_TRUE(other.ok()) << other.status();

  ASSERT_TRUE((*holder)->Exec("BEGIN IMMEDIATE").ok());
  absl::Status busy = (*other)->Exec("BEGIN IMMEDIATE");
  EXPECT_EQ(busy.code(), absl::StatusCode::kUnavailable) << busy;
  ASSERT_TRUE((*holder)->Exec("COMMIT").ok());
  EXPECT_TRUE((*other)->Exec("BEGIN IMMEDIATE; COMMIT").ok());
}

}  // namespace
}  // namespace kvcanary
