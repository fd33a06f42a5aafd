// The evidence store: opening and its schema, appending to the chain,
// queries, the append-only triggers, and a writer killed mid-append.
// Verify's tests are in evidence_verify_test.cc.
#include "storage/evidence_store.h"

#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/sqlite_db.h"
#include "tests/storage/evidence_store_test_util.h"

namespace kvcanary::storage {
namespace {

using ::nlohmann::json;
using testing::FreshPath;
using ::testing::HasSubstr;
using testing::kZeroHash;
using testing::MakeStore;
using testing::OpenRaw;
using testing::OpenStore;
using testing::Probe;
using testing::QueryInt;
using testing::Record;
using testing::VerifyOrDie;

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
