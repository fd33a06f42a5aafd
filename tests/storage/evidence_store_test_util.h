// Helpers of the evidence store's tests (evidence_store_test.cc,
// evidence_verify_test.cc): fresh database paths under the test temp dir,
// small records, stores made and opened, raw SQL on the file, and Verify.
#ifndef KVCANARY_TESTS_STORAGE_EVIDENCE_STORE_TEST_UTIL_H_
#define KVCANARY_TESTS_STORAGE_EVIDENCE_STORE_TEST_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "storage/evidence_store.h"
#include "storage/sqlite_db.h"

namespace kvcanary::storage::testing {

inline const std::string kZeroHash(64, '0');

// A fresh path under the test temp dir, unique to this process, with no
// leftover db/-wal/-shm.
inline std::string FreshPath(const std::string& name) {
  const std::string path = absl::StrCat(
      ::testing::TempDir(), "/evidence_store_test_", getpid(), "_", name);
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    std::filesystem::remove(path + suffix);
  }
  return path;
}

inline EvidenceRecord Record(const std::string& kind,
                             const std::string& campaign, int64_t ts_us,
                             nlohmann::json body) {
  EvidenceRecord r;
  r.kind = kind;
  r.campaign = campaign;
  r.ts_us = ts_us;
  r.body = std::move(body);
  return r;
}

// The i-th record of a small campaign: ids, hashes, counts only.
inline EvidenceRecord Probe(int i, const std::string& campaign = "camp-1") {
  return Record(i % 2 == 0 ? "probe" : "finding", campaign,
                1700000000000000 + i,
                nlohmann::json{{"canary_id", absl::StrCat("c", i)},
                               {"page", i * 7},
                               {"tenant", "t-a"}});
}

inline std::unique_ptr<EvidenceStore> OpenStore(const std::string& path) {
  auto store = EvidenceStore::Open(path);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

// Creates `path` holding `n` records appended as one batch; the store is
// closed again (the WAL checkpointed into the main file).
inline void MakeStore(const std::string& path, int n) {
  auto store = OpenStore(path);
  ASSERT_NE(store, nullptr);
  std::vector<EvidenceRecord> records;
  for (int i = 0; i < n; ++i) records.push_back(Probe(i));
  auto seqs = store->Append(records);
  ASSERT_TRUE(seqs.ok()) << seqs.status();
}

inline std::unique_ptr<SqliteDb> OpenRaw(const std::string& path) {
  auto db = SqliteDb::Open(path);
  EXPECT_TRUE(db.ok()) << db.status();
  return db.ok() ? *std::move(db) : nullptr;
}

inline int64_t QueryInt(SqliteDb& db, const std::string& sql) {
  auto stmt = db.Prepare(sql);
  EXPECT_TRUE(stmt.ok()) << stmt.status();
  if (!stmt.ok()) return -1;
  auto row = stmt->Step();
  EXPECT_TRUE(row.ok() && *row) << sql;
  if (!row.ok() || !*row) return -1;
  return stmt->ColumnInt64(0);
}

inline VerifyReport VerifyOrDie(const std::string& path) {
  auto report = EvidenceStore::Verify(path);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : VerifyReport{};
}

}  // namespace kvcanary::storage::testing

#endif  // KVCANARY_TESTS_STORAGE_EVIDENCE_STORE_TEST_UTIL_H_
