// One connection to an evidence database (storage/evidence_store.h):
// opening it (read-write, migrated, holding the writer lock; or read-only),
// whether a writer holds a file, the campaigns it never ended, and appending
// records to the chain. Its schema is storage/evidence_schema.h, its
// encoding storage/evidence_encoding.h; reads are in evidence_query.cc,
// Verify in evidence_verify.cc.
#include "storage/evidence_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "storage/evidence_encoding.h"
#include "storage/evidence_schema.h"

namespace kvcanary::storage {
namespace {

using evidence_internal::CanonicalText;
using evidence_internal::CheckIdentity;
using evidence_internal::HashOf;
using evidence_internal::InTransaction;
using evidence_internal::OpenForReading;
using evidence_internal::ValidateRecord;
using evidence_internal::ZeroHash;

}  // namespace

// --- EvidenceStore -----------------------------------------------------------

EvidenceStore::EvidenceStore(std::unique_ptr<SqliteDb> db)
    : db_(std::move(db)) {}

EvidenceStore::~EvidenceStore() {
  if (writer_lock_fd_ >= 0) close(writer_lock_fd_);  // drops the OFD lock
}

void EvidenceStore::HoldWriterLock() {
  const int fd = open(db_->path().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  struct flock lock = {};
  lock.l_type = F_RDLCK;  // shared: several writers may hold it at once
  lock.l_whence = SEEK_SET;
  lock.l_start = kWriterLockOffset;
  lock.l_len = 1;
  // An OFD lock, not a POSIX one: closing it never drops SQLite's own
  // POSIX locks on the same file, and it conflicts within one process too.
  if (fcntl(fd, F_OFD_SETLK, &lock) != 0) {
    close(fd);
    return;
  }
  writer_lock_fd_ = fd;
}

namespace {

// True if an open file description other than `fd`'s holds the writer lock
// (an OFD lock never conflicts with its own description's locks).
bool OtherWriterHolds(int fd) {
  struct flock lock = {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = EvidenceStore::kWriterLockOffset;
  lock.l_len = 1;
  return fcntl(fd, F_OFD_GETLK, &lock) == 0 && lock.l_type != F_UNLCK;
}

}  // namespace

bool EvidenceStore::WriterActive(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = OtherWriterHolds(fd);
  close(fd);
  return held;
}

absl::StatusOr<UnfinishedCampaigns> EvidenceStore::FindUnfinishedCampaigns()
    const {
  UnfinishedCampaigns out;
  ASSIGN_OR_RETURN(
      Statement stmt,
      db_->Prepare("SELECT campaign FROM evidence WHERE kind = "
                   "'campaign_start' AND campaign NOT IN (SELECT campaign "
                   "FROM evidence WHERE kind = 'campaign_end') ORDER BY seq"));
  while (true) {
    ASSIGN_OR_RETURN(const bool has_row, stmt.Step());
    if (!has_row) break;
    out.campaigns.push_back(stmt.ColumnText(0));
  }
  // A read-write store asking does not count itself as the writer.
  out.writer_active = writer_lock_fd_ >= 0 ? OtherWriterHolds(writer_lock_fd_)
                                           : WriterActive(db_->path());
  return out;
}

absl::StatusOr<std::unique_ptr<EvidenceStore>> EvidenceStore::OpenReadOnly(
    const std::string& path) {
  std::unique_ptr<WalCopy> copy;
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, OpenForReading(path, &copy));
  const absl::StatusOr<int64_t> version =
      CheckIdentity(*db, /*allow_fresh=*/false);
  if (!version.ok()) return copy->Rename(version.status());
  if (*version < 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": evidence schema version ", *version, " was never created"));
  }
  std::unique_ptr<EvidenceStore> store(new EvidenceStore(std::move(db)));
  store->copy_ = std::move(copy);
  return store;
}

absl::StatusOr<std::unique_ptr<EvidenceStore>> EvidenceStore::Open(
    const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, SqliteDb::Open(path));
  ASSIGN_OR_RETURN(const int64_t version,
                   CheckIdentity(*db, /*allow_fresh=*/true));
  std::unique_ptr<EvidenceStore> store(new EvidenceStore(std::move(db)));
  RETURN_IF_ERROR(store->Migrate(static_cast<int>(version)));
  store->HoldWriterLock();
  return store;
}

absl::StatusOr<std::vector<int64_t>> EvidenceStore::Append(
    const std::vector<EvidenceRecord>& records) {
  std::vector<std::string> bodies;  // canonical body text, one per record
  bodies.reserve(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    absl::StatusOr<std::string> body = ValidateRecord(records[i]);
    if (!body.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(db_->path(), ": evidence record ", i, " of ",
                       records.size(), ": ", body.status().message()));
    }
    bodies.push_back(*std::move(body));
  }
  if (records.empty()) return std::vector<int64_t>();
  return AppendInTransaction(bodies, records);
}

absl::StatusOr<int64_t> EvidenceStore::Append(const EvidenceRecord& record) {
  ASSIGN_OR_RETURN(const std::vector<int64_t> seqs,
                   Append(std::vector<EvidenceRecord>{record}));
  return seqs.front();
}

absl::StatusOr<std::vector<int64_t>> EvidenceStore::AppendInTransaction(
    const std::vector<std::string>& bodies,
    const std::vector<EvidenceRecord>& records) {
  std::vector<int64_t> seqs;
  RETURN_IF_ERROR(InTransaction(*db_, [&]() -> absl::Status {
    seqs.clear();
    // The chain continues from the last committed row, whoever wrote it.
    ASSIGN_OR_RETURN(
        Statement last,
        db_->Prepare(
            "SELECT seq, hash FROM evidence ORDER BY seq DESC LIMIT 1"));
    ASSIGN_OR_RETURN(const bool has_last, last.Step());
    int64_t seq = has_last ? last.ColumnInt64(0) : 0;
    std::string prev_hash = has_last ? last.ColumnText(1) : ZeroHash();

    ASSIGN_OR_RETURN(
        Statement insert,
        db_->Prepare("INSERT INTO evidence(seq, kind, campaign, ts_us, body, "
                     "prev_hash, hash) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
    for (size_t i = 0; i < records.size(); ++i) {
      const EvidenceRecord& r = records[i];
      ++seq;
      std::string hash =
          HashOf(prev_hash,
                 CanonicalText(seq, r.kind, r.campaign, r.ts_us, bodies[i]));
      insert.Reset();
      RETURN_IF_ERROR(insert.BindInt64(1, seq));
      RETURN_IF_ERROR(insert.BindText(2, r.kind));
      RETURN_IF_ERROR(insert.BindText(3, r.campaign));
      RETURN_IF_ERROR(insert.BindInt64(4, r.ts_us));
      RETURN_IF_ERROR(insert.BindText(5, bodies[i]));
      RETURN_IF_ERROR(insert.BindText(6, prev_hash));
      RETURN_IF_ERROR(insert.BindText(7, hash));
      RETURN_IF_ERROR(insert.Step().status());
      prev_hash = std::move(hash);
      seqs.push_back(seq);
    }
    return absl::OkStatus();
  }));
  return seqs;
}

}  // namespace kvcanary::storage
