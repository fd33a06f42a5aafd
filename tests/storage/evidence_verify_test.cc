// EvidenceStore::Verify against files an attacker edited after the fact
// (every column of every row, deleted, renumbered, reordered and forged
// rows, a dropped table), and against files it must not touch.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/evidence_store.h"
#include "storage/sqlite_db.h"
#include "tests/storage/evidence_store_test_util.h"

namespace kvcanary::storage {
namespace {

using testing::FreshPath;
using ::testing::HasSubstr;
using testing::kZeroHash;
using testing::MakeStore;
using testing::OpenRaw;
using testing::Probe;
using testing::QueryInt;
using testing::VerifyOrDie;

// What an attacker holding the file can do: drop the triggers, then run SQL.
void Tamper(const std::string& path, const std::string& sql) {
  auto db = OpenRaw(path);
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("DROP TRIGGER IF EXISTS evidence_no_update;"
                       "DROP TRIGGER IF EXISTS evidence_no_delete;"
                       "DROP TRIGGER IF EXISTS evidence_no_replace;")
                  .ok());
  const absl::Status status = db->Exec(sql);
  ASSERT_TRUE(status.ok()) << status;
}

TEST(EvidenceStoreVerifyTest, CleanDatabaseIsOkWithAllRowsChecked) {
  const std::string path = FreshPath("clean.db");
  MakeStore(path, 25);
  const VerifyReport report = VerifyOrDie(path);
  EXPECT_TRUE(report.ok) << report.problem;
  EXPECT_EQ(report.rows_checked, 25);
  EXPECT_EQ(report.first_bad_seq, 0);
  EXPECT_EQ(report.problem, "");
}

TEST(EvidenceStoreVerifyTest, EmptyDatabaseIsOkWithNoRows) {
  const std::string path = FreshPath("no_rows.db");
  MakeStore(path, 0);
  const VerifyReport report = VerifyOrDie(path);
  EXPECT_TRUE(report.ok) << report.problem;
  EXPECT_EQ(report.rows_checked, 0);
}

TEST(EvidenceStoreVerifyTest, MissingFileIsNotFoundAndNotCreated) {
  const std::string path = FreshPath("missing.db");
  EXPECT_EQ(EvidenceStore::Verify(path).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(EvidenceStoreVerifyTest, DoesNotMigrateAFileWithoutSchema) {
  const std::string path = FreshPath("unmigrated.db");
  std::ofstream(path).close();
  auto report = EvidenceStore::Verify(path);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
  auto db = OpenRaw(path);
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(QueryInt(*db, "SELECT COUNT(*) FROM sqlite_master"), 0);
}

// Every column of every row, edited by someone who dropped the triggers, is
// found at that row.
TEST(EvidenceStoreVerifyTest, EditOfAnyColumnOfAnyRowNamesThatRow) {
  constexpr int kRows = 5;
  const std::string clean = FreshPath("edit_template.db");
  MakeStore(clean, kRows);
  const std::vector<std::pair<std::string, std::string>> edits = {
      {"seq", "seq = seq + 1000"},
      {"kind", "kind = kind || '_x'"},
      {"campaign", "campaign = campaign || 'x'"},
      {"ts_us", "ts_us = ts_us + 1"},
      {"body", "body = '{\"canary_id\":\"forged\"}'"},
      {"prev_hash",
       "prev_hash = substr(prev_hash, 1, 63) || "
       "CASE substr(prev_hash, 64) WHEN '0' THEN '1' ELSE '0' END"},
      {"hash",
       "hash = substr(hash, 1, 63) || "
       "CASE substr(hash, 64) WHEN '0' THEN '1' ELSE '0' END"},
      {"body type", "body = CAST(body AS BLOB)"},  // same bytes, blob
  };
  for (int seq = 1; seq <= kRows; ++seq) {
    for (const auto& [column, set] : edits) {
      SCOPED_TRACE(absl::StrCat("seq ", seq, ", ", column));
      const std::string path = FreshPath("edit.db");
      std::filesystem::copy_file(clean, path);
      Tamper(path,
             absl::StrCat("UPDATE evidence SET ", set, " WHERE seq = ", seq));
      const VerifyReport report = VerifyOrDie(path);
      EXPECT_FALSE(report.ok);
      EXPECT_EQ(report.first_bad_seq, seq) << report.problem;
      EXPECT_EQ(report.rows_checked, seq - 1);
      EXPECT_THAT(report.problem, HasSubstr(absl::StrCat("seq ", seq, ":")));
    }
  }
}

TEST(EvidenceStoreVerifyTest, DeletedMiddleRowIsNamedAsMissing) {
  const std::string path = FreshPath("deleted.db");
  MakeStore(path, 5);
  Tamper(path, "DELETE FROM evidence WHERE seq = 3");
  const VerifyReport report = VerifyOrDie(path);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad_seq, 3);
  EXPECT_EQ(report.rows_checked, 2);
  EXPECT_THAT(report.problem, HasSubstr("seq 3: missing"));
}

TEST(EvidenceStoreVerifyTest, DeletedAndRenumberedRowBreaksTheLink) {
  const std::string path = FreshPath("renumbered.db");
  MakeStore(path, 5);
  Tamper(path,
         "DELETE FROM evidence WHERE seq = 3;"
         "UPDATE evidence SET seq = seq - 1 WHERE seq > 3");
  const VerifyReport report = VerifyOrDie(path);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad_seq, 3);
  EXPECT_THAT(report.problem, HasSubstr("prev_hash"));
}

TEST(EvidenceStoreVerifyTest, ReorderedRowsAreFoundAtTheFirstMovedRow) {
  const std::string path = FreshPath("reordered.db");
  MakeStore(path, 5);
  Tamper(path,
         "UPDATE evidence SET seq = -1 WHERE seq = 2;"
         "UPDATE evidence SET seq = 2 WHERE seq = 4;"
         "UPDATE evidence SET seq = 4 WHERE seq = -1");
  const VerifyReport report = VerifyOrDie(path);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad_seq, 2) << report.problem;
}

TEST(EvidenceStoreVerifyTest, ChangedLastRowIsFound) {
  const std::string path = FreshPath("last_row.db");
  MakeStore(path, 5);
  Tamper(path, "UPDATE evidence SET ts_us = 0 WHERE seq = 5");
  const VerifyReport report = VerifyOrDie(path);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad_seq, 5);
  EXPECT_EQ(report.rows_checked, 4);
  EXPECT_THAT(report.problem, HasSubstr("hash does not match"));
}

TEST(EvidenceStoreVerifyTest, AppendedRowWithWrongPrevHashIsFound) {
  const std::string path = FreshPath("wrong_prev.db");
  MakeStore(path, 5);
  // A self-consistent row (its hash is right for its fields) that starts a
  // new chain instead of linking to seq 5.
  const EvidenceRecord forged = Probe(5);
  auto db = OpenRaw(path);
  ASSERT_NE(db, nullptr);
  auto insert =
      db->Prepare("INSERT INTO evidence VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  ASSERT_TRUE(insert.ok()) << insert.status();
  ASSERT_TRUE(insert->BindInt64(1, 6).ok());
  ASSERT_TRUE(insert->BindText(2, forged.kind).ok());
  ASSERT_TRUE(insert->BindText(3, forged.campaign).ok());
  ASSERT_TRUE(insert->BindInt64(4, forged.ts_us).ok());
  ASSERT_TRUE(insert->BindText(5, forged.body.dump()).ok());
  ASSERT_TRUE(insert->BindText(6, kZeroHash).ok());
  ASSERT_TRUE(
      insert->BindText(7, EvidenceStore::RowHash(kZeroHash, 6, forged)).ok());
  ASSERT_TRUE(insert->Step().ok());

  const VerifyReport report = VerifyOrDie(path);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad_seq, 6);
  EXPECT_EQ(report.rows_checked, 5);
  EXPECT_THAT(report.problem,
              HasSubstr("prev_hash does not match the hash of seq 5"));
}

TEST(EvidenceStoreVerifyTest, DroppedEvidenceTableIsDataLoss) {
  const std::string path = FreshPath("dropped.db");
  MakeStore(path, 2);
  Tamper(path, "DROP TABLE evidence");
  EXPECT_EQ(EvidenceStore::Verify(path).status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace kvcanary::storage
