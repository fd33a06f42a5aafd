// The tamper-evident evidence store: an append-only SQLite table whose rows
// form a SHA-256 hash chain, so that editing, deleting, reordering or
// inserting a row after the fact is found by Verify. Built on
// storage/sqlite_db.h; the schema, the chain and the canonical encoding are
// written down in docs/evidence-store.md.
//
// Evidence holds ids, hashes, timings and counts only, never a customer's
// text.
#ifndef KVCANARY_STORAGE_EVIDENCE_STORE_H_
#define KVCANARY_STORAGE_EVIDENCE_STORE_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "storage/sqlite_db.h"
#include "storage/wal_copy.h"

namespace kvcanary::storage {

// One evidence record as the caller gives it.
struct EvidenceRecord {
  // "campaign_start", "probe", "finding", "positive_control",
  // "campaign_end", ...: non-empty, [a-z_]+.
  std::string kind;
  std::string campaign;  // campaign id, non-empty
  int64_t ts_us = 0;     // wall-clock microseconds since the Unix epoch
  // A JSON object: ids, hashes, timings, counts. Never customer text.
  nlohmann::json body;
};

// A stored row: the record plus its place in the chain.
struct EvidenceRow {
  int64_t seq = 0;  // 1, 2, 3, ... in append order
  EvidenceRecord record;
  std::string prev_hash;  // 64 lower-case hex chars; row 1's is 64 '0's
  std::string hash;  // SHA-256 hex over prev_hash and the canonical encoding
};

struct VerifyReport {
  bool ok = false;
  // Rows found good before verification stopped (all rows when ok).
  int64_t rows_checked = 0;
  // The position in the chain (the seq expected there) where verification
  // first failed; 0 when ok.
  int64_t first_bad_seq = 0;
  std::string problem;  // names the row; empty when ok
};

// A row exactly as stored, for the Merkle tree (storage/evidence_tlog.h):
// the fields the canonical encoding covers, body as its stored text.
struct StoredRow {
  int64_t seq = 0;
  std::string kind;
  std::string campaign;
  int64_t ts_us = 0;
  std::string body;  // the stored text, not re-serialised

  // The canonical encoding of these fields under `at_seq` (the row's own
  // seq for its leaf; another to test whether a row was renumbered). Equal
  // to CanonicalEncoding(seq, record) for every row Append wrote.
  std::string LeafData(int64_t at_seq) const;
  std::string LeafData() const { return LeafData(seq); }
};

// Campaigns with a campaign_start row and no campaign_end row.
struct UnfinishedCampaigns {
  std::vector<std::string> campaigns;  // in the order they started
  // True if a read-write EvidenceStore holds the file open now (in any
  // process): the campaigns may still be running. False means none does,
  // so every campaign listed is interrupted. Always false on read-only media.
  bool writer_active = false;
};

// Empty kind/campaign and zero after_seq/limit mean "any". Rows come in seq
// order, those with seq > after_seq, at most `limit` of them.
struct EvidenceFilter {
  std::string kind;
  std::string campaign;
  int64_t after_seq = 0;
  int64_t limit = 0;  // >= 0
};

// One connection to an evidence database.
// Not thread-safe: use one EvidenceStore per thread. Several stores (in one
// or several processes) may append to the same file: appends are serialised
// by SQLite's write lock and each continues the chain from the last committed
// row.
class EvidenceStore {
 public:
  // PRAGMA application_id of every evidence database: "kvca" in ASCII.
  static constexpr int32_t kApplicationId = 0x6b766361;
  // PRAGMA user_version this binary creates and migrates up to.
  static constexpr int kSchemaVersion = 1;

  // Opens or creates the evidence database at `path` (SqliteDb::Open: WAL,
  // synchronous=FULL, quick_check), checks PRAGMA application_id and
  // PRAGMA user_version, and runs the migrations from the stored version up
  // to kSchemaVersion, each in its own transaction. Errors name the path:
  //   kFailedPrecondition "<path>: not a kvcanary evidence database" for any
  //     other application_id, or a SQLite file that already holds other
  //     tables;
  //   kFailedPrecondition naming both versions if the file's schema is newer
  //     than this binary's;
  //   kDataLoss for a corrupt file, kNotFound / kPermissionDenied /
  //     kUnavailable as SqliteDb::Open reports them.
  // While the store is open, it holds an open-file-description read lock
  // on byte kWriterLockOffset of the file (past anything SQLite locks), so
  // that WriterActive can tell whether any writer has the file open.
  static absl::StatusOr<std::unique_ptr<EvidenceStore>> Open(
      const std::string& path);

  // Opens an existing evidence database for reading only (SqliteDb's
  // read_only: `mode=ro`, and `immutable=1` when no -wal/-shm exist, so it
  // works on read-only media). Creates, migrates and writes nothing; Append
  // fails. A -wal without a -shm and no writer (a killed writer's files,
  // handed over) is read through a private copy (storage/wal_copy.h), so
  // the rows committed to the WAL count and nothing is written beside
  // `path`. kNotFound for a missing file, kFailedPrecondition for a file
  // that is not an evidence database or has a schema this binary does not
  // know (naming `path`-wal when the rows must be there and it is
  // missing), kDataLoss for a corrupt one.
  static absl::StatusOr<std::unique_ptr<EvidenceStore>> OpenReadOnly(
      const std::string& path);

  // Byte offset of the writer lock (1 GiB + 64 KiB; SQLite's locks live at
  // 1 GiB .. 1 GiB + 512).
  static constexpr off_t kWriterLockOffset = 0x40010000;
  // True if a store opened with Open (read-write) holds `path` now, in this
  // or another process. False on read-only media or when the lock cannot be
  // queried for another reason (then nothing can be writing through us).
  static bool WriterActive(const std::string& path);

  // Every row as stored, in seq order, handed to `fn` one at a time (one
  // read snapshot). Stops at, and returns, the first error `fn` returns.
  absl::Status ForEachStoredRow(
      const std::function<absl::Status(const StoredRow&)>& fn) const;

  // Campaigns started and never ended, and whether a writer holds the file.
  absl::StatusOr<UnfinishedCampaigns> FindUnfinishedCampaigns() const;

  const std::string& path() const { return db_->path(); }

  EvidenceStore(const EvidenceStore&) = delete;
  EvidenceStore& operator=(const EvidenceStore&) = delete;
  ~EvidenceStore();

  // Appends `records` in one transaction, continuing the hash chain from the
  // last committed row, and returns the seqs assigned. Durable once it
  // returns OK. Every record is validated first; kInvalidArgument naming the
  // record and the problem (empty kind or campaign, kind not [a-z_]+, body
  // not a JSON object, a body string that is not UTF-8), and then nothing is
  // written. An empty vector writes nothing. kUnavailable if another
  // connection held the write lock for the whole busy timeout.
  absl::StatusOr<std::vector<int64_t>> Append(
      const std::vector<EvidenceRecord>& records);
  absl::StatusOr<int64_t> Append(const EvidenceRecord& record);

  // The rows that match `filter`, in seq order. kInvalidArgument for a
  // negative limit; kDataLoss if a stored body is not a JSON object (the file
  // was edited: run Verify).
  absl::StatusOr<std::vector<EvidenceRow>> Query(
      const EvidenceFilter& filter) const;
  // Query(filter)->size(), without reading the rows.
  absl::StatusOr<int64_t> Count(const EvidenceFilter& filter) const;

  // Recomputes the whole chain of the database at `path`: seqs contiguous
  // from 1, each prev_hash equal to the previous row's hash (64 '0's for row
  // 1), every column of the type and form Append writes, and each hash equal
  // to RowHash of the stored fields. Stops at, and names, the first bad row.
  // Opens the file read-only (OpenReadOnly's way, so read-only media work);
  // does not create, migrate or write to it. Without a checkpoint this finds
  // edits, swaps and middle deletions that left the chain as it was, but not
  // a cut tail or a re-hashed chain: see storage/evidence_tlog.h. A broken
  // chain is an OK status with report.ok == false; a file that cannot be
  // verified at all is an error status: kNotFound (missing), kDataLoss
  // (corrupt, or no evidence table), kFailedPrecondition (not a kvcanary
  // evidence database, or a schema version this binary does not know).
  static absl::StatusOr<VerifyReport> Verify(const std::string& path);

  // The canonical text that is hashed:
  //   "kvcanary-evidence-v1\n" + seq + "\n" + kind + "\n" + campaign + "\n"
  //   + ts_us + "\n" + r.body.dump()
  // with seq and ts_us in decimal and body.dump() being nlohmann::json's
  // compact form (keys sorted, no whitespace).
  // REQUIRES: r.body's strings are valid UTF-8 (Append refuses others).
  static std::string CanonicalEncoding(int64_t seq, const EvidenceRecord& r);
  // Lower-case hex SHA-256 of prev_hash + "\n" + CanonicalEncoding(seq, r).
  static std::string RowHash(const std::string& prev_hash, int64_t seq,
                             const EvidenceRecord& r);

 private:
  explicit EvidenceStore(std::unique_ptr<SqliteDb> db);
  // Takes the writer lock (see Open). Failing to lock is not an error: a
  // file system without OFD locks only loses the "writer active" signal.
  void HoldWriterLock();

  absl::Status Migrate(int from_version);
  absl::StatusOr<std::vector<int64_t>> AppendInTransaction(
      const std::vector<std::string>& bodies,
      const std::vector<EvidenceRecord>& records);

  // Before db_, so that a private copy outlives the connection to it.
  std::unique_ptr<WalCopy> copy_;  // OpenReadOnly's; null for Open
  std::unique_ptr<SqliteDb> db_;
  int writer_lock_fd_ = -1;  // owned; -1: none held
};

}  // namespace kvcanary::storage

#endif  // KVCANARY_STORAGE_EVIDENCE_STORE_H_
