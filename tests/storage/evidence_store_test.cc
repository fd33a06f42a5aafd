#include "storage/evidence_store.h"

#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/sqlite_db.h"

namespace kvcanary::storage {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;

const std::string kZeroHash(64, '0');

// A fresh path under the test temp dir, unique to this process, with no
// leftover db/-wal/-shm.
std::string FreshPath(const std::string& name) {
  const std::string path = absl::StrCat(
      ::testing::TempDir(), "/evidence_store_test_", getpid(), "_", name);
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    std::filesystem::remove(path + suffix);
  }
  return path;
}

EvidenceRecord Record(const std::string& kind, const std::string& campaign,
                      int64_t ts_us, json body) {
  EvidenceRecord r;
  r.kind = kind;
  r.campaign = campaign;
  r.ts_us = ts_us;
  r.body = std::move(body);
  return r;
}

// The i-th record of a small campaign: ids, hashes, counts only.
EvidenceRecord Probe(int i, const std::string& campaign = "camp-1") {
  return Record(i % 2 == 0 ? "probe" : "finding", campaign,
                1700000000000000 + i,
                json{{"canary_id", absl::StrCat("c", i)},
                     {"page", i * 7},
                     {"tenant", "t-a"}});
}

std::unique_ptr<EvidenceStore> OpenStore(const std::string& path) {
  auto store = EvidenceStore::Open(path);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

// Creates `path` holding `n` records appended as one batch; the store is
// closed again (the WAL checkpointed into the main file).
void MakeStore(const std::string& path, int n) {
  auto store = OpenStore(path);
  ASSERT_NE(store, nullptr);
  std::vector<EvidenceRecord> records;
  for (int i = 0; i < n; ++i) records.push_back(Probe(i));
  auto seqs = store->Append(records);
  ASSERT_TRUE(seqs.ok()) << seqs.status();
}

std::unique_ptr<SqliteDb> OpenRaw(const std::string& path) {
  auto db = SqliteDb::Open(path);
  EXPECT_TRUE(db.ok()) << db.status();
  return db.ok() ? *std::move(db) : nullptr;
}

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

int64_t QueryInt(SqliteDb& db, const std::string& sql) {
  auto stmt = db.Prepare(sql);
  EXPECT_TRUE(stmt.ok()) << stmt.status();
  if (!stmt.ok()) return -1;
  auto row = stmt->Step();
  EXPECT_TRUE(row.ok() && *row) << sql;
  if (!row.ok() || !*row) return -1;
  return stmt->ColumnInt64(0);
}

VerifyReport VerifyOrDie(const std::string& path) {
  auto report = EvidenceStore::Verify(path);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : VerifyReport{};
}

// --- Open, schema, migrations --------------------------------------------

TEST(EvidenceStoreTest, OpenCreatesVersionedAppendOnlySchema) {
  const std::string path = FreshPath("schema.db");
  ASSERT_NE(OpenStore(path), nullptr);

  auto db = OpenRaw(path);
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(QueryInt(*db, "PRAGMA application_id"),
            EvidenceStore::kApplicationId);
  EXPECT_EQ(QueryInt(*db, "PRAGMA user_version"), 1);
  EXPECT_EQ(EvidenceStore::kSchemaVersion, 1);
  EXPECT_EQ(QueryInt(*db,
                     "SELECT COUNT(*) FROM sqlite_master WHERE name IN "
                     "('evidence', 'evidence_kind', 'evidence_campaign', "
                     "'evidence_no_update', 'evidence_no_delete', "
                     "'evidence_no_replace')"),
            6);
}

TEST(EvidenceStoreTest, ReopenKeepsRowsAndVersion) {
  const std::string path = FreshPath("reopen.db");
  MakeStore(path, 3);
  auto store = OpenStore(path);
  ASSERT_NE(store, nullptr);
  auto count = store->Count({});
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 3);
  auto db = OpenRaw(path);
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(QueryInt(*db, "PRAGMA user_version"), 1);
}

TEST(EvidenceStoreTest, OpenOfEmptyFileCreatesSchema) {
  const std::string path = FreshPath("empty_file.db");
  std::ofstream(path).close();  // 0 bytes: a valid empty SQLite database
  ASSERT_NE(OpenStore(path), nullptr);
  EXPECT_TRUE(VerifyOrDie(path).ok);
}

TEST(EvidenceStoreTest, OpenRejectsOtherApplicationId) {
  const std::string path = FreshPath("other_app.db");
  {
    auto db = OpenRaw(path);
    ASSERT_NE(db, nullptr);
    ASSERT_TRUE(db->Exec("PRAGMA application_id = 42").ok());
  }
  auto store = EvidenceStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(),
              HasSubstr(path + ": not a kvcanary evidence database"));

  auto report = EvidenceStore::Verify(path);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(EvidenceStoreTest, OpenRejectsForeignSqliteFileWithoutTouchingIt) {
  const std::string path = FreshPath("foreign.db");
  {
    auto db = OpenRaw(path);
    ASSERT_NE(db, nullptr);
    ASSERT_TRUE(db->Exec("CREATE TABLE notes(x TEXT)").ok());
  }
  auto store = EvidenceStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(),
              HasSubstr(path + ": not a kvcanary evidence database"));
  auto db = OpenRaw(path);
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(QueryInt(*db, "SELECT COUNT(*) FROM sqlite_master"), 1);
  EXPECT_EQ(QueryInt(*db, "PRAGMA user_version"), 0);
}

TEST(EvidenceStoreTest, OpenRejectsNewerSchemaVersionNamingBoth) {
  const std::string path = FreshPath("newer.db");
  MakeStore(path, 1);
  {
    auto db = OpenRaw(path);
    ASSERT_NE(db, nullptr);
    ASSERT_TRUE(db->Exec("PRAGMA user_version = 7").ok());
  }
  auto store = EvidenceStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr(path));
  EXPECT_THAT(store.status().message(), HasSubstr("version 7"));
  EXPECT_THAT(store.status().message(), HasSubstr("version 1"));

  auto report = EvidenceStore::Verify(path);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(EvidenceStoreTest, OpenCorruptFileIsDataLoss) {
  const std::string path = FreshPath("garbage.db");
  std::mt19937 rng(7);
  std::string bytes(8192, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());

  auto store = EvidenceStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(EvidenceStore::Verify(path).status().code(),
            absl::StatusCode::kDataLoss);
}

// --- Append and the chain ----------------------------------------------------

TEST(EvidenceStoreTest, CanonicalEncodingIsTheDocumentedText) {
  // Keys given out of order: the encoding sorts them and drops whitespace.
  const EvidenceRecord r =
      Record("probe", "c1", 1700000000000000, json{{"b", 1}, {"a", "x"}});
  EXPECT_EQ(EvidenceStore::CanonicalEncoding(1, r),
            "kvcanary-evidence-v1\n1\nprobe\nc1\n1700000000000000\n"
            "{\"a\":\"x\",\"b\":1}");
  // sha256("000...0\n" + the text above), computed outside kvcanary: pins
  // the on-disk format.
  const std::string golden =
      "27c0d0a33a05ef20572eaf9c47645d9adafc2712c4be1e2a3ee76b3de213c973";
  EXPECT_EQ(EvidenceStore::RowHash(kZeroHash, 1, r), golden);

  auto store = OpenStore(FreshPath("golden.db"));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Append(r).ok());
  auto rows = store->Query({});
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].hash, golden);
}

TEST(EvidenceStoreTest, AppendAssignsContiguousSeqsAndLinksHashes) {
  const std::string path = FreshPath("chain.db");
  auto store = OpenStore(path);
  ASSERT_NE(store, nullptr);
  auto first = store->Append(Probe(0));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, 1);
  auto batch = store->Append({Probe(1), Probe(2), Probe(3)});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(*batch, (std::vector<int64_t>{2, 3, 4}));

  auto rows = store->Query({});
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 4u);
  for (size_t i = 0; i < rows->size(); ++i) {
    const EvidenceRow& row = (*rows)[i];
    EXPECT_EQ(row.seq, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(row.prev_hash, i == 0 ? kZeroHash : (*rows)[i - 1].hash);
    EXPECT_EQ(row.hash,
              EvidenceStore::RowHash(row.prev_hash, row.seq, row.record));
    const EvidenceRecord expected = Probe(static_cast<int>(i));
    EXPECT_EQ(row.record.kind, expected.kind);
    EXPECT_EQ(row.record.campaign, expected.campaign);
    EXPECT_EQ(row.record.ts_us, expected.ts_us);
    EXPECT_EQ(row.record.body, expected.body);
  }
}

TEST(EvidenceStoreTest, AppendContinuesChainAfterReopen) {
  const std::string path = FreshPath("continue.db");
  MakeStore(path, 2);
  auto store = OpenStore(path);
  ASSERT_NE(store, nullptr);
  auto seq = store->Append(Probe(2));
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ(*seq, 3);
  auto rows = store->Query({});
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[2].prev_hash, (*rows)[1].hash);
  EXPECT_TRUE(VerifyOrDie(path).ok);
}

TEST(EvidenceStoreTest, TwoStoresOnOneFileShareOneChain) {
  const std::string path = FreshPath("two_writers.db");
  auto a = OpenStore(path);
  auto b = OpenStore(path);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(*a->Append(Probe(0)), 1);
  EXPECT_EQ(*b->Append(Probe(1)), 2);
  EXPECT_EQ(*a->Append(Probe(2)), 3);
  const VerifyReport report = VerifyOrDie(path);
  EXPECT_TRUE(report.ok) << report.problem;
  EXPECT_EQ(report.rows_checked, 3);
}

TEST(EvidenceStoreTest, AppendEmptyBatchWritesNothing) {
  auto store = OpenStore(FreshPath("empty_batch.db"));
  ASSERT_NE(store, nullptr);
  auto seqs = store->Append(std::vector<EvidenceRecord>{});
  ASSERT_TRUE(seqs.ok()) << seqs.status();
  EXPECT_TRUE(seqs->empty());
  EXPECT_EQ(*store->Count({}), 0);
}

TEST(EvidenceStoreTest, InvalidRecordFailsWholeBatchNamingTheProblem) {
  struct Case {
    EvidenceRecord record;
    std::string problem;
  };
  EvidenceRecord null_body = Probe(1);
  null_body.body = json();
  const std::vector<Case> cases = {
      {Record("", "c", 1, json::object()), "empty kind"},
      {Record("Probe", "c", 1, json::object()), "kind 'Probe' is not [a-z_]+"},
      {Record("probe-1", "c", 1, json::object()), "is not [a-z_]+"},
      {Record("probe 1", "c", 1, json::object()), "is not [a-z_]+"},
      {Record("probe", "", 1, json::object()), "empty campaign"},
      {Record("probe", "c", 1, json::array({1, 2})),
       "body is a JSON array, not a JSON object"},
      {Record("probe", "c", 1, json("text")), "not a JSON object"},
      {Record("probe", "c", 1, json(5)), "not a JSON object"},
      {null_body, "body is a JSON null"},
      {Record("probe", "c", 1, json{{"id", "\xff"}}), "body cannot be encoded"},
  };
  const std::string path = FreshPath("invalid.db");
  auto store = OpenStore(path);
  ASSERT_NE(store, nullptr);
  for (const Case& c : cases) {
    auto seqs = store->Append({Probe(0), c.record});
    ASSERT_FALSE(seqs.ok()) << c.problem;
    EXPECT_EQ(seqs.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(seqs.status().message(), HasSubstr("evidence record 1 of 2"));
    EXPECT_THAT(seqs.status().message(), HasSubstr(c.problem));
  }
  EXPECT_EQ(*store->Count({}), 0);  // not even the valid record 0
  EXPECT_EQ(store->Append(EvidenceRecord{}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EvidenceStoreTest, QueryAndCountFilterByKindCampaignAfterSeqAndLimit) {
  auto store = OpenStore(FreshPath("query.db"));
  ASSERT_NE(store, nullptr);
  std::vector<EvidenceRecord> records;
  for (int i = 0; i < 10; ++i) {
    records.push_back(Probe(i, i < 6 ? "camp-a" : "camp-b"));
  }
  ASSERT_TRUE(store->Append(records).ok());

  const auto seqs_of = [&](const EvidenceFilter& filter) {
    std::vector<int64_t> seqs;
    auto rows = store->Query(filter);
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (rows.ok()) {
      for (const EvidenceRow& row : *rows) seqs.push_back(row.seq);
    }
    auto count = store->Count(filter);
    EXPECT_TRUE(count.ok()) << count.status();
    if (count.ok()) {
      EXPECT_EQ(*count, static_cast<int64_t>(seqs.size()));
    }
    return seqs;
  };
  using Seqs = std::vector<int64_t>;
  EXPECT_EQ(seqs_of({}), (Seqs{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  // Probe(i) is a "probe" for even i, i.e. odd seqs.
  EXPECT_EQ(seqs_of({"probe", "", 0, 0}), (Seqs{1, 3, 5, 7, 9}));
  EXPECT_EQ(seqs_of({"", "camp-b", 0, 0}), (Seqs{7, 8, 9, 10}));
  EXPECT_EQ(seqs_of({"finding", "camp-a", 0, 0}), (Seqs{2, 4, 6}));
  EXPECT_EQ(seqs_of({"", "", 7, 0}), (Seqs{8, 9, 10}));
  EXPECT_EQ(seqs_of({"", "", 2, 3}), (Seqs{3, 4, 5}));
  EXPECT_EQ(seqs_of({"probe", "camp-a", 1, 2}), (Seqs{3, 5}));
  EXPECT_EQ(seqs_of({"campaign_end", "", 0, 0}), Seqs{});
  EXPECT_EQ(seqs_of({"", "camp-x", 0, 0}), Seqs{});

  EXPECT_EQ(store->Query({"", "", 0, -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Count({"", "", 0, -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EvidenceStoreTest, UpdateDeleteAndReplaceAreRefusedAsAppendOnly) {
  const std::string path = FreshPath("append_only.db");
  MakeStore(path, 3);
  auto db = OpenRaw(path);  // a normal connection: the triggers are in place
  ASSERT_NE(db, nullptr);
  for (const char* sql : {
           "UPDATE evidence SET body = '{}' WHERE seq = 2",
           "DELETE FROM evidence WHERE seq = 2",
           "DELETE FROM evidence",
           "INSERT OR REPLACE INTO evidence VALUES(2, 'probe', 'c', 1, '{}', "
           "'x', 'y')",
       }) {
    const absl::Status status = db->Exec(sql);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << sql;
    EXPECT_THAT(status.message(), HasSubstr("evidence is append-only")) << sql;
  }
  EXPECT_EQ(QueryInt(*db, "SELECT COUNT(*) FROM evidence"), 3);
  const VerifyReport report = VerifyOrDie(path);
  EXPECT_TRUE(report.ok) << report.problem;
}

// --- Verify ------------------------------------------------------------------

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

// --- Crash safety
// --------------------------------------------------------------

// Reads one int64 from `fd`, waiting at most 10 s. False on EOF or timeout.
bool ReadSeq(int fd, int64_t* seq) {
  size_t got = 0;
  char* out = reinterpret_cast<char*>(seq);
  while (got < sizeof(*seq)) {
    pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, 10000) <= 0) return false;
    const ssize_t n = read(fd, out + got, sizeof(*seq) - got);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

TEST(EvidenceStoreCrashTest, KilledWriterLosesNoReportedRowAndChainContinues) {
  constexpr size_t kReportedBeforeKill = 40;
  const std::string path = FreshPath("killed.db");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The writer: appends batches of 1..4 records, reporting each seq once
    // its Append returned OK (durable). Never returns into gtest.
    close(fds[0]);
    auto store = EvidenceStore::Open(path);
    if (!store.ok()) _exit(2);
    for (int i = 0; i < 100000; ++i) {
      std::vector<EvidenceRecord> batch;
      for (int j = 0; j <= i % 4; ++j) batch.push_back(Probe(i * 4 + j));
      auto seqs = (*store)->Append(batch);
      if (!seqs.ok()) _exit(3);
      for (const int64_t seq : *seqs) {
        if (write(fds[1], &seq, sizeof(seq)) != sizeof(seq)) _exit(4);
      }
    }
    _exit(0);
  }
  close(fds[1]);
  std::vector<int64_t> reported;
  int64_t seq = 0;
  while (reported.size() < kReportedBeforeKill && ReadSeq(fds[0], &seq)) {
    reported.push_back(seq);
  }
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int wait_status = 0;
  ASSERT_EQ(waitpid(pid, &wait_status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == SIGKILL)
      << "writer exited early with status " << wait_status;
  while (ReadSeq(fds[0], &seq)) reported.push_back(seq);  // sent before death
  close(fds[0]);
  ASSERT_GE(reported.size(), kReportedBeforeKill);

  const VerifyReport report = VerifyOrDie(path);
  EXPECT_TRUE(report.ok) << report.problem;
  auto store = OpenStore(path);
  ASSERT_NE(store, nullptr);
  auto rows = store->Query({});
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_GE(rows->size(), reported.size());
  for (size_t i = 0; i < reported.size(); ++i) {
    EXPECT_EQ(reported[i], static_cast<int64_t>(i) + 1);
    // Verify passed, so seqs are contiguous: seq s is row s - 1.
    ASSERT_LE(reported[i], static_cast<int64_t>(rows->size()));
    EXPECT_EQ((*rows)[reported[i] - 1].seq, reported[i]);
  }
  const EvidenceRow last = rows->back();
  auto next = store->Append(Probe(0, "camp-after-crash"));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, last.seq + 1);
  auto tail = store->Query({"", "", last.seq, 0});
  ASSERT_TRUE(tail.ok()) << tail.status();
  ASSERT_EQ(tail->size(), 1u);
  EXPECT_EQ((*tail)[0].prev_hash, last.hash);
  EXPECT_TRUE(VerifyOrDie(path).ok);
}

}  // namespace
}  // namespace kvcanary::storage
