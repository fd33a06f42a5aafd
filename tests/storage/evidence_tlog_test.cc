#include "storage/evidence_tlog.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/sqlite_db.h"

namespace kvcanary::storage {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;

constexpr int kRows = 24;  // start, 22 probes/findings, end

std::string FreshDir(const std::string& name) {
  const std::string dir = absl::StrCat(
      ::testing::TempDir(), "/evidence_tlog_test_", getpid(), "_", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

EvidenceRecord Rec(const std::string& kind, int i) {
  EvidenceRecord r;
  r.kind = kind;
  r.campaign = "camp-1";
  r.ts_us = 1700000000000000 + i;
  r.body = json{{"canary_id", absl::StrCat("c", i)}, {"page", i}};
  return r;
}

// kRows rows: seq 1 campaign_start, every 5th a finding, seq kRows the end.
std::vector<EvidenceRecord> Campaign(bool with_end = true) {
  std::vector<EvidenceRecord> out{Rec("campaign_start", 0)};
  for (int i = 1; i < kRows - 1; ++i)
    out.push_back(Rec(i % 5 == 0 ? "finding" : "probe", i));
  if (with_end) out.push_back(Rec("campaign_end", kRows));
  return out;
}

struct Fixture {
  std::string dir, db, ckpt;
  Ed25519Key key = *Ed25519Key::Generate();
};

// A closed database of one campaign and a checkpoint of it.
Fixture MakeLog(const std::string& name) {
  Fixture f;
  f.dir = FreshDir(name);
  f.db = f.dir + "/evidence.db";
  f.ckpt = f.dir + "/ckpt";
  auto store = EvidenceStore::Open(f.db);
  CHECK(store.ok()) << store.status();
  CHECK((*store)->Append(Campaign()).ok());
  CHECK(WriteCheckpoint(**store, f.key, "kvcanary/test", {f.ckpt}).ok());
  return f;
}

std::unique_ptr<SqliteDb> Raw(const std::string& path) {
  auto db = SqliteDb::Open(path);
  CHECK(db.ok()) << db.status();
  CHECK((*db)
            ->Exec("DROP TRIGGER evidence_no_update; DROP TRIGGER "
                   "evidence_no_delete; DROP TRIGGER evidence_no_replace")
            .ok());
  return *std::move(db);
}

// What an attacker with file access and no secret can do: rewrite the rows
// as `records` numbered 1.. with a freshly computed, valid hash chain.
void RewriteChain(const std::string& path,
                  const std::vector<EvidenceRecord>& records) {
  std::unique_ptr<SqliteDb> db = Raw(path);
  CHECK(db->Exec("DELETE FROM evidence").ok());
  std::string prev(64, '0');
  for (size_t i = 0; i < records.size(); ++i) {
    const int64_t seq = static_cast<int64_t>(i + 1);
    const std::string hash = EvidenceStore::RowHash(prev, seq, records[i]);
    auto stmt =
        db->Prepare("INSERT INTO evidence VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)");
    CHECK(stmt.ok());
    CHECK(stmt->BindInt64(1, seq).ok());
    CHECK(stmt->BindText(2, records[i].kind).ok());
    CHECK(stmt->BindText(3, records[i].campaign).ok());
    CHECK(stmt->BindInt64(4, records[i].ts_us).ok());
    CHECK(stmt->BindText(5, records[i].body.dump()).ok());
    CHECK(stmt->BindText(6, prev).ok());
    CHECK(stmt->BindText(7, hash).ok());
    CHECK(stmt->Step().ok());
    prev = hash;
  }
}

TlogVerifyReport VerifyOrDie(const Fixture& f) {
  auto report = VerifyAgainstCheckpoints(f.db, f.ckpt, f.key);
  CHECK(report.ok()) << report.status();
  return *report;
}

TEST(EvidenceTlogTest, LeafIsTheCanonicalEncodingTheChainCovers) {
  const Fixture f = MakeLog("leaf");
  auto store = EvidenceStore::OpenReadOnly(f.db);
  ASSERT_TRUE(store.ok()) << store.status();
  const std::vector<MerkleHash> leaves = *EvidenceLeafHashes(**store);
  const std::vector<EvidenceRecord> records = Campaign();
  ASSERT_EQ(leaves.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(leaves[i], MerkleLeafHash(EvidenceStore::CanonicalEncoding(
                             static_cast<int64_t>(i + 1), records[i])));
  }
}

TEST(EvidenceTlogTest, IntactLogVerifiesAndProofsCheckAgainstTheCheckpoint) {
  const Fixture f = MakeLog("intact");
  {
    auto store = EvidenceStore::Open(f.db);
    ASSERT_TRUE(
        (*store)->Append(Rec("probe", 99)).ok());  // after the checkpoint
  }
  const TlogVerifyReport report = VerifyOrDie(f);
  EXPECT_TRUE(report.ok);
  ASSERT_EQ(report.checkpoints.size(), 1u);
  EXPECT_EQ(report.checkpoints[0].what, "intact");
  EXPECT_EQ(report.rows_after_checkpoint, 1);

  auto store = EvidenceStore::OpenReadOnly(f.db);
  const Checkpoint c = report.checkpoints[0].checkpoint;
  auto inclusion = ProveInclusion(**store, 7, c.tree_size);
  ASSERT_TRUE(inclusion.ok()) << inclusion.status();
  EXPECT_EQ(inclusion->root, c.root);
  EXPECT_TRUE(VerifyInclusion(6, c.tree_size, inclusion->leaf_hash,
                              inclusion->proof, c.root)
                  .ok());
  auto consistency = ProveConsistency(**store, c.tree_size, 0);
  ASSERT_TRUE(consistency.ok()) << consistency.status();
  EXPECT_EQ(consistency->new_size, static_cast<uint64_t>(kRows + 1));
  EXPECT_TRUE(VerifyConsistency(c.tree_size, consistency->new_size, c.root,
                                consistency->new_root, consistency->proof)
                  .ok());
  EXPECT_EQ(ProveInclusion(**store, kRows + 2).status().code(),
            absl::StatusCode::kOutOfRange);
}

// --- The tamper suite -------------------------------------------------------

TEST(EvidenceTlogTest, EditedRowWithRehashedChainIsNamed) {
  const Fixture f = MakeLog("edit");
  std::vector<EvidenceRecord> records = Campaign();
  records[6].body["page"] = 4242;  // seq 7
  RewriteChain(f.db, records);
  const TlogVerifyReport r = VerifyOrDie(f);
  EXPECT_TRUE(r.chain.ok);  // the chain alone is fooled
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.checkpoints[0].what, "edited");
  EXPECT_EQ(r.checkpoints[0].first_diverging_row, 7);
  EXPECT_EQ(r.checkpoints[0].rows_missing, 0);
  EXPECT_THAT(r.checkpoints[0].description, HasSubstr("row 7 was edited"));
}

TEST(EvidenceTlogTest, DeletedMiddleRowIsNamed) {
  const Fixture f = MakeLog("delete");
  ASSERT_TRUE(Raw(f.db)->Exec("DELETE FROM evidence WHERE seq = 10").ok());
  const TlogVerifyReport r = VerifyOrDie(f);
  EXPECT_FALSE(r.chain.ok);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.checkpoints[0].what, "deleted");
  EXPECT_EQ(r.checkpoints[0].first_diverging_row, 10);
  EXPECT_EQ(r.checkpoints[0].rows_missing, 1);
  EXPECT_THAT(r.checkpoints[0].description, HasSubstr("(seq 10)"));
}

TEST(EvidenceTlogTest, CutTailIsNamedWithTheMissingCount) {
  const Fixture f = MakeLog("cut");
  ASSERT_TRUE(Raw(f.db)->Exec("DELETE FROM evidence WHERE seq > 15").ok());
  const TlogVerifyReport r = VerifyOrDie(f);
  EXPECT_TRUE(r.chain.ok);  // a cut tail passes the chain
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.checkpoints[0].what, "truncated");
  EXPECT_EQ(r.checkpoints[0].first_diverging_row, 16);
  EXPECT_EQ(r.checkpoints[0].rows_missing, kRows - 15);
  EXPECT_THAT(r.checkpoints[0].description, HasSubstr("cut after row 15"));
}

TEST(EvidenceTlogTest, DeletedFindingsWithRenumberedRehashedChainAreNamed) {
  const Fixture f = MakeLog("findings");
  std::vector<EvidenceRecord> kept;
  std::vector<int64_t> findings;
  const std::vector<EvidenceRecord> all = Campaign();
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].kind == "finding") {
      findings.push_back(static_cast<int64_t>(i + 1));
    } else {
      kept.push_back(all[i]);
    }
  }
  ASSERT_EQ(findings.size(), 4u);  // seqs 6, 11, 16, 21
  RewriteChain(f.db, kept);
  const TlogVerifyReport r = VerifyOrDie(f);
  EXPECT_TRUE(r.chain.ok);  // re-hashed: the chain alone is fooled
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.checkpoints[0].what, "deleted_rehashed");
  EXPECT_EQ(r.checkpoints[0].first_diverging_row, 6);
  EXPECT_EQ(r.checkpoints[0].rows_missing, 4);
  EXPECT_THAT(r.checkpoints[0].description, HasSubstr("seq 6, 11, 16, 21"));
  EXPECT_THAT(r.checkpoints[0].description, HasSubstr("re-hashed"));
}

TEST(EvidenceTlogTest, SwappedRowsAreNamed) {
  const Fixture f = MakeLog("swap");
  std::vector<EvidenceRecord> records = Campaign();
  std::swap(records[4], records[11]);  // seqs 5 and 12
  RewriteChain(f.db, records);
  const TlogVerifyReport r = VerifyOrDie(f);
  EXPECT_TRUE(r.chain.ok);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.checkpoints[0].what, "swapped");
  EXPECT_EQ(r.checkpoints[0].first_diverging_row, 5);
  EXPECT_THAT(r.checkpoints[0].description, HasSubstr("rows 5 and 12"));
}

TEST(EvidenceTlogTest, WithoutLeavesFileTamperingIsStillDetected) {
  const Fixture f = MakeLog("noleaves");
  std::filesystem::remove(f.ckpt + "/leaves.bin");
  ASSERT_TRUE(Raw(f.db)->Exec("DELETE FROM evidence WHERE seq > 20").ok());
  const TlogVerifyReport r = VerifyOrDie(f);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.checkpoints[0].what, "truncated");
  EXPECT_EQ(r.checkpoints[0].rows_missing, kRows - 20);
  EXPECT_THAT(r.checkpoints[0].description, HasSubstr("no leaves.bin"));
}

TEST(EvidenceTlogTest, EditedLeavesFileIsIgnoredNotBelieved) {
  const Fixture f = MakeLog("badleaves");
  {
    std::fstream io(f.ckpt + "/leaves.bin",
                    std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(32 * 3);
    io.put('\x55');
  }
  std::vector<EvidenceRecord> records = Campaign();
  records[3].body["page"] = 1;
  RewriteChain(f.db, records);
  const TlogVerifyReport r = VerifyOrDie(f);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.checkpoints[0].what, "diverged");
  EXPECT_THAT(r.checkpoints[0].description, HasSubstr("does not match"));
}

TEST(EvidenceTlogTest, ForgedCheckpointFailsAndSigningRefusesADivergedLog) {
  Fixture f = MakeLog("forged");
  const Ed25519Key other = *Ed25519Key::Generate();
  auto r = VerifyAgainstCheckpoints(f.db, f.ckpt, other);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->checkpoints[0].what, "bad_signature");

  ASSERT_TRUE(Raw(f.db)->Exec("DELETE FROM evidence WHERE seq > 15").ok());
  auto store = EvidenceStore::Open(f.db);
  ASSERT_TRUE(store.ok());
  auto again = WriteCheckpoint(**store, f.key, "kvcanary/test", {f.ckpt});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(again.status().message(), HasSubstr("not consistent"));
}

TEST(EvidenceTlogTest, SeveralCheckpointsInADirectoryAreAllChecked) {
  Fixture f = MakeLog("several");
  {
    auto store = EvidenceStore::Open(f.db);
    ASSERT_TRUE((*store)->Append(Campaign()).ok());
    ASSERT_TRUE(
        WriteCheckpoint(**store, f.key, "kvcanary/test", {f.ckpt}).ok());
  }
  TlogVerifyReport r = VerifyOrDie(f);
  EXPECT_TRUE(r.ok);
  ASSERT_EQ(r.checkpoints.size(), 2u);
  EXPECT_EQ(r.checkpoints[0].checkpoint.tree_size,
            static_cast<uint64_t>(kRows));
  EXPECT_EQ(r.checkpoints[1].checkpoint.tree_size, 2u * kRows);
  ASSERT_TRUE(
      Raw(f.db)
          ->Exec(absl::StrCat("DELETE FROM evidence WHERE seq > ", kRows + 3))
          .ok());
  r = VerifyOrDie(f);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.checkpoints[0].ok);
  EXPECT_EQ(r.checkpoints[1].what, "truncated");
  EXPECT_EQ(r.checkpoints[1].first_diverging_row, kRows + 4);
}

// --- Interrupted campaigns and read-only media ------------------------------

TEST(EvidenceTlogTest, CampaignWithoutEndIsInterruptedOnceNoWriterHoldsIt) {
  const std::string dir = FreshDir("interrupted");
  const std::string db = dir + "/evidence.db";
  auto writer = EvidenceStore::Open(db);
  ASSERT_TRUE((*writer)->Append(Campaign(/*with_end=*/false)).ok());
  {
    auto reader = EvidenceStore::OpenReadOnly(db);
    ASSERT_TRUE(reader.ok()) << reader.status();
    auto open = (*reader)->FindUnfinishedCampaigns();
    ASSERT_TRUE(open.ok());
    EXPECT_EQ(open->campaigns, std::vector<std::string>{"camp-1"});
    EXPECT_TRUE(open->writer_active);
    // The writer asking about itself does not count itself.
    EXPECT_FALSE((*writer)->FindUnfinishedCampaigns()->writer_active);
  }
  writer->reset();
  auto reader = EvidenceStore::OpenReadOnly(db);
  auto open = (*reader)->FindUnfinishedCampaigns();
  EXPECT_EQ(open->campaigns, std::vector<std::string>{"camp-1"});
  EXPECT_FALSE(open->writer_active);
  EXPECT_FALSE(EvidenceStore::WriterActive(db));
}

TEST(EvidenceTlogTest, ReadOnlyOpenWritesNothingAndAppendFails) {
  const Fixture f = MakeLog("readonly");
  ASSERT_FALSE(std::filesystem::exists(f.db + "-wal"));
  auto store = EvidenceStore::OpenReadOnly(f.db);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_FALSE((*store)->Append(Rec("probe", 1)).ok());
  EXPECT_FALSE(std::filesystem::exists(f.db + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(f.db + "-shm"));
  EXPECT_EQ(EvidenceStore::OpenReadOnly(f.dir + "/missing.db").status().code(),
            absl::StatusCode::kNotFound);
}

// Runs inside the read-only bind mount (see below); skipped otherwise.
TEST(EvidenceTlogTest, ReadOnlyMediaChild) {
  const char* db = std::getenv("KVCANARY_TLOG_RO_DB");
  if (db == nullptr) GTEST_SKIP() << "runs only as the read-only mount child";
  const std::string dir = std::filesystem::path(db).parent_path().string();
  ASSERT_LT(open((dir + "/probe-write").c_str(), O_WRONLY | O_CREAT, 0644), 0)
      << "the directory is writable: not a read-only mount";
  ASSERT_EQ(errno, EROFS);
  auto chain = EvidenceStore::Verify(db);
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_TRUE(chain->ok);
  auto key = Ed25519Key::FromPem(std::getenv("KVCANARY_TLOG_RO_PUB"));
  ASSERT_TRUE(key.ok());
  auto report = VerifyAgainstCheckpoints(db, dir + "/ckpt", *key);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok);
  auto store = EvidenceStore::OpenReadOnly(db);
  ASSERT_TRUE(store.ok()) << store.status();
  EvidenceFilter findings;
  findings.kind = "finding";
  EXPECT_EQ(*(*store)->Count(findings), 4);
  EXPECT_FALSE((*store)->FindUnfinishedCampaigns()->writer_active);
}

TEST(EvidenceTlogTest, VerifyWorksOnAReadOnlyBindMount) {
  if (std::getenv("KVCANARY_TLOG_RO_DB") != nullptr) GTEST_SKIP();
  if (std::system("unshare -m true >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "unshare -m is not permitted here (needs root or "
                    "CAP_SYS_ADMIN): read-only bind mount not tested";
  }
  const Fixture f = MakeLog("romount");
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  const std::string cmd = absl::StrCat(
      "KVCANARY_TLOG_RO_DB='", f.db, "' KVCANARY_TLOG_RO_PUB='",
      f.key.PublicPem(), "' unshare -m sh -c \"mount --bind -o ro '", f.dir,
      "' '", f.dir, "' && '", self,
      "' --gtest_filter=EvidenceTlogTest.ReadOnlyMediaChild\" >", f.dir,
      ".log 2>&1");
  const int rc = std::system(cmd.c_str());
  std::ifstream log(f.dir + ".log");
  const std::string out((std::istreambuf_iterator<char>(log)), {});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("[  PASSED  ] 1 test"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("SKIPPED")));
}

}  // namespace
}  // namespace kvcanary::storage
