#include "storage/evidence_store.h"

#include <fcntl.h>
#include <openssl/sha.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/check.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace kvcanary::storage {
namespace {

constexpr absl::string_view kEncodingPrefix = "kvcanary-evidence-v1\n";
constexpr size_t kHashHexChars = 2 * SHA256_DIGEST_LENGTH;  // 64

// prev_hash of row 1.
const std::string& ZeroHash() {
  static const std::string* const zero = new std::string(kHashHexChars, '0');
  return *zero;
}

// --- Schema and migrations ---------------------------------------------------

// One migration step: run `sql` and set PRAGMA user_version = to_version, in
// one transaction. Steps are applied in order from the file's version up.
// To change the schema, append a step; never edit a released one.
struct Migration {
  int to_version;
  const char* sql;
};

// Version 1: the evidence table, its indexes, the append-only triggers, and
// the application id that marks the file as a kvcanary evidence database.
// A REPLACE conflict deletes the old row without firing DELETE triggers
// (unless recursive_triggers is on), so inserting over an existing seq is
// refused too.
constexpr const char kSchemaV1[] = R"sql(
CREATE TABLE evidence(
  seq INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,
  campaign TEXT NOT NULL,
  ts_us INTEGER NOT NULL,
  body TEXT NOT NULL,
  prev_hash TEXT NOT NULL,
  hash TEXT NOT NULL);
CREATE INDEX evidence_kind ON evidence(kind);
CREATE INDEX evidence_campaign ON evidence(campaign);
CREATE TRIGGER evidence_no_update BEFORE UPDATE ON evidence
BEGIN
  SELECT RAISE(ABORT, 'evidence is append-only');
END;
CREATE TRIGGER evidence_no_delete BEFORE DELETE ON evidence
BEGIN
  SELECT RAISE(ABORT, 'evidence is append-only');
END;
CREATE TRIGGER evidence_no_replace BEFORE INSERT ON evidence
WHEN EXISTS (SELECT 1 FROM evidence WHERE seq = NEW.seq)
BEGIN
  SELECT RAISE(ABORT, 'evidence is append-only');
END;
PRAGMA application_id = 1802920801;
)sql";
static_assert(EvidenceStore::kApplicationId == 1802920801,
              "kSchemaV1 spells the application id out");

constexpr Migration kMigrations[] = {
    {1, kSchemaV1},
};
static_assert(kMigrations[std::size(kMigrations) - 1].to_version ==
                  EvidenceStore::kSchemaVersion,
              "the last migration step reaches kSchemaVersion");

// --- SQLite helpers ----------------------------------------------------------

absl::StatusOr<int64_t> QueryInt64(SqliteDb& db, absl::string_view sql) {
  ASSIGN_OR_RETURN(Statement stmt, db.Prepare(sql));
  ASSIGN_OR_RETURN(const bool has_row, stmt.Step());
  if (!has_row) {
    return absl::InternalError(
        absl::StrCat(db.path(), ": `", sql, "` returned no row"));
  }
  return stmt.ColumnInt64(0);
}

// Runs `body` between BEGIN IMMEDIATE and COMMIT; rolls back if either
// fails. IMMEDIATE takes the write lock first, so what `body` reads cannot
// change under it.
absl::Status InTransaction(SqliteDb& db,
                           const std::function<absl::Status()>& body) {
  RETURN_IF_ERROR(db.Exec("BEGIN IMMEDIATE"));
  absl::Status status = body();
  if (status.ok()) status = db.Exec("COMMIT");
  if (!status.ok()) {
    // Fails only if SQLite already rolled back (e.g. on SQLITE_FULL).
    db.Exec("ROLLBACK").IgnoreError();
  }
  return status;
}

// Checks that `db` is a kvcanary evidence database and returns its schema
// version. With `allow_fresh`, a file with no schema at all (new or empty)
// passes as version 0.
absl::StatusOr<int64_t> CheckIdentity(SqliteDb& db, bool allow_fresh) {
  ASSIGN_OR_RETURN(const int64_t application_id,
                   QueryInt64(db, "PRAGMA application_id"));
  ASSIGN_OR_RETURN(const int64_t version,
                   QueryInt64(db, "PRAGMA user_version"));
  if (application_id != EvidenceStore::kApplicationId) {
    bool fresh = false;
    if (allow_fresh && application_id == 0 && version == 0) {
      ASSIGN_OR_RETURN(const int64_t objects,
                       QueryInt64(db, "SELECT COUNT(*) FROM sqlite_master"));
      fresh = objects == 0;
    }
    if (!allow_fresh && application_id == 0 && version == 0 &&
        WalMissing(db.path())) {
      // The header says WAL and holds no schema yet: everything the writer
      // committed is in a -wal the reader was not given.
      return absl::FailedPreconditionError(absl::StrCat(
          db.path(), ": no evidence in this file alone: its rows are in ",
          db.path(), "-wal, which is missing; copy ", db.path(),
          "-wal (the writer's file of that name) beside it and run again"));
    }
    if (!fresh) {
      return absl::FailedPreconditionError(
          absl::StrCat(db.path(), ": not a kvcanary evidence database",
                       " (application_id ", application_id, ")"));
    }
  }
  if (version > EvidenceStore::kSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(db.path(), ": evidence schema version ", version,
                     " is newer than this binary's version ",
                     EvidenceStore::kSchemaVersion, "; use a newer kvcanary"));
  }
  return version;
}

// Opens `path` read-only (works on read-only media; writes nothing), through
// a private copy when it has a -wal without a -shm (storage/wal_copy.h).
// `*copy` must outlive the connection.
absl::StatusOr<std::unique_ptr<SqliteDb>> OpenForReading(
    const std::string& path, std::unique_ptr<WalCopy>* copy) {
  const bool writer = EvidenceStore::WriterActive(path);
  ASSIGN_OR_RETURN(*copy, WalCopy::For(path, writer));
  SqliteOpenOptions options;
  options.read_only = true;
  // A live writer may create the WAL after we look: then no immutable.
  options.immutable_if_no_wal = !writer;
  absl::StatusOr<std::unique_ptr<SqliteDb>> db =
      SqliteDb::Open((*copy)->open_path(), options);
  if (!db.ok()) return (*copy)->Rename(db.status());
  return db;
}

// --- Records and the canonical encoding --------------------------------------

bool IsKind(absl::string_view kind) {
  if (kind.empty()) return false;
  for (const char c : kind) {
    if (!((c >= 'a' && c <= 'z') || c == '_')) return false;
  }
  return true;
}

bool IsHashHex(absl::string_view hex) {
  if (hex.size() != kHashHexChars) return false;
  for (const char c : hex) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// body.dump(): compact, keys sorted. nlohmann throws on a string that is not
// UTF-8; that becomes kInvalidArgument here.
absl::StatusOr<std::string> DumpBody(const nlohmann::json& body) {
  try {
    return body.dump();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("body cannot be encoded: ", e.what()));
  }
}

// Why `r` cannot be appended, or its canonical body text.
absl::StatusOr<std::string> ValidateRecord(const EvidenceRecord& r) {
  if (r.kind.empty()) return absl::InvalidArgumentError("empty kind");
  if (!IsKind(r.kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kind '", absl::CEscape(r.kind), "' is not [a-z_]+"));
  }
  if (r.campaign.empty()) return absl::InvalidArgumentError("empty campaign");
  if (!r.body.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "body is a JSON ", r.body.type_name(), ", not a JSON object"));
  }
  return DumpBody(r.body);
}

std::string CanonicalText(int64_t seq, absl::string_view kind,
                          absl::string_view campaign, int64_t ts_us,
                          absl::string_view body_text) {
  return absl::StrCat(kEncodingPrefix, seq, "\n", kind, "\n", campaign, "\n",
                      ts_us, "\n", body_text);
}

std::string HashOf(absl::string_view prev_hash,
                   absl::string_view canonical_text) {
  return Sha256Hex(absl::StrCat(prev_hash, "\n", canonical_text));
}

// --- Filters -----------------------------------------------------------------

// ?1 after_seq, ?2 kind, ?3 campaign; the caller adds LIMIT ?4.
std::string WhereClause(const EvidenceFilter& filter) {
  std::string where = " WHERE seq > ?1";
  if (!filter.kind.empty()) where += " AND kind = ?2";
  if (!filter.campaign.empty()) where += " AND campaign = ?3";
  return where;
}

absl::Status BindFilter(const EvidenceFilter& filter, Statement& stmt) {
  RETURN_IF_ERROR(stmt.BindInt64(1, filter.after_seq));
  if (!filter.kind.empty()) RETURN_IF_ERROR(stmt.BindText(2, filter.kind));
  if (!filter.campaign.empty()) {
    RETURN_IF_ERROR(stmt.BindText(3, filter.campaign));
  }
  // LIMIT -1: no limit.
  return stmt.BindInt64(4, filter.limit > 0 ? filter.limit : -1);
}

absl::Status CheckFilter(const std::string& path,
                         const EvidenceFilter& filter) {
  if (filter.limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": negative evidence filter limit ", filter.limit));
  }
  return absl::OkStatus();
}

// --- Verify ------------------------------------------------------------------

// kFailedPrecondition / kDataLoss unless `db` is an evidence database that
// has its evidence table.
absl::Status CheckVerifiable(SqliteDb& db, const std::string& path) {
  ASSIGN_OR_RETURN(const int64_t version,
                   CheckIdentity(db, /*allow_fresh=*/false));
  if (version < 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": evidence schema version ", version, " was never created"));
  }
  ASSIGN_OR_RETURN(const int64_t tables,
                   QueryInt64(db,
                              "SELECT COUNT(*) FROM sqlite_master "
                              "WHERE type = 'table' AND name = 'evidence'"));
  if (tables != 1) {
    return absl::DataLossError(
        absl::StrCat(path, ": the evidence table is missing"));
  }
  return absl::OkStatus();
}

// What is wrong with Verify's current row as row `expected_seq` chained
// after `prev_hash`; "" if nothing.
std::string RowProblem(const Statement& stmt, int64_t expected_seq,
                       const std::string& prev_hash) {
  const int64_t seq = stmt.ColumnInt64(0);
  if (seq > expected_seq) {
    return absl::StrCat("missing: the row after seq ", expected_seq - 1,
                        " is seq ", seq);
  }
  if (seq < expected_seq) {
    return absl::StrCat("a row with seq ", seq,
                        " precedes it; seqs start at 1");
  }
  // The storage class Append gives each column 1..6; a value of another
  // class can read back as the same text and hash to the same value.
  static constexpr const char* kColumnNames[] = {"kind", "campaign",  "ts_us",
                                                 "body", "prev_hash", "hash"};
  static constexpr const char* kColumnTypes[] = {"text", "text", "integer",
                                                 "text", "text", "text"};
  for (int c = 0; c < 6; ++c) {
    const std::string type = stmt.ColumnText(7 + c);
    if (type != kColumnTypes[c]) {
      return absl::StrCat(kColumnNames[c], " is stored as ", type, ", not ",
                          kColumnTypes[c]);
    }
  }
  const std::string kind = stmt.ColumnText(1);
  const std::string campaign = stmt.ColumnText(2);
  const int64_t ts_us = stmt.ColumnInt64(3);
  const std::string body = stmt.ColumnText(4);
  const std::string stored_prev = stmt.ColumnText(5);
  const std::string stored_hash = stmt.ColumnText(6);

  if (stored_prev != prev_hash) {
    return expected_seq == 1
               ? std::string("prev_hash is not 64 '0's")
               : absl::StrCat("prev_hash does not match the hash of seq ",
                              expected_seq - 1);
  }
  if (!IsKind(kind)) {
    return absl::StrCat("kind '", absl::CEscape(kind), "' is not [a-z_]+");
  }
  if (campaign.empty()) return "empty campaign";
  const nlohmann::json parsed =
      nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) return "body is not a JSON object";
  absl::StatusOr<std::string> canonical_body = DumpBody(parsed);
  if (!canonical_body.ok() || *canonical_body != body) {
    return "body is not in canonical form (body.dump())";
  }
  if (!IsHashHex(stored_hash)) {
    return "hash is not 64 lower-case hex characters";
  }
  const std::string computed =
      HashOf(prev_hash, CanonicalText(seq, kind, campaign, ts_us, body));
  if (computed != stored_hash) {
    return absl::StrCat("hash does not match the row's contents (stored ",
                        stored_hash, ", computed ", computed, ")");
  }
  return "";
}

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

std::string StoredRow::LeafData(int64_t at_seq) const {
  return CanonicalText(at_seq, kind, campaign, ts_us, body);
}

absl::Status EvidenceStore::ForEachStoredRow(
    const std::function<absl::Status(const StoredRow&)>& fn) const {
  // One statement: one read snapshot, even while another process appends.
  ASSIGN_OR_RETURN(Statement stmt,
                   db_->Prepare("SELECT seq, kind, campaign, ts_us, body "
                                "FROM evidence ORDER BY seq"));
  StoredRow row;
  while (true) {
    ASSIGN_OR_RETURN(const bool has_row, stmt.Step());
    if (!has_row) return absl::OkStatus();
    row.seq = stmt.ColumnInt64(0);
    row.kind = stmt.ColumnText(1);
    row.campaign = stmt.ColumnText(2);
    row.ts_us = stmt.ColumnInt64(3);
    row.body = stmt.ColumnText(4);
    RETURN_IF_ERROR(fn(row));
  }
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

absl::Status EvidenceStore::Migrate(int from_version) {
  for (const Migration& step : kMigrations) {
    if (step.to_version <= from_version) continue;
    RETURN_IF_ERROR(InTransaction(*db_, [&]() -> absl::Status {
      // Another process may have migrated since the caller looked.
      ASSIGN_OR_RETURN(const int64_t now,
                       QueryInt64(*db_, "PRAGMA user_version"));
      if (now >= step.to_version) return absl::OkStatus();
      if (now != step.to_version - 1) {  // edited under us: do not guess
        return absl::FailedPreconditionError(
            absl::StrCat(db_->path(), ": evidence schema version changed to ",
                         now, " while migrating from ", from_version));
      }
      RETURN_IF_ERROR(db_->Exec(step.sql));
      return db_->Exec(absl::StrCat("PRAGMA user_version = ", step.to_version));
    }));
  }
  return absl::OkStatus();
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

absl::StatusOr<std::vector<EvidenceRow>> EvidenceStore::Query(
    const EvidenceFilter& filter) const {
  RETURN_IF_ERROR(CheckFilter(db_->path(), filter));
  ASSIGN_OR_RETURN(
      Statement stmt,
      db_->Prepare(absl::StrCat(
          "SELECT seq, kind, campaign, ts_us, body, prev_hash, hash "
          "FROM evidence",
          WhereClause(filter), " ORDER BY seq LIMIT ?4")));
  RETURN_IF_ERROR(BindFilter(filter, stmt));
  std::vector<EvidenceRow> rows;
  while (true) {
    ASSIGN_OR_RETURN(const bool has_row, stmt.Step());
    if (!has_row) break;
    EvidenceRow row;
    row.seq = stmt.ColumnInt64(0);
    row.record.kind = stmt.ColumnText(1);
    row.record.campaign = stmt.ColumnText(2);
    row.record.ts_us = stmt.ColumnInt64(3);
    row.record.body = nlohmann::json::parse(stmt.ColumnText(4), nullptr,
                                            /*allow_exceptions=*/false);
    if (!row.record.body.is_object()) {
      return absl::DataLossError(
          absl::StrCat(db_->path(), ": evidence seq ", row.seq,
                       ": stored body is not a JSON object; run verify"));
    }
    row.prev_hash = stmt.ColumnText(5);
    row.hash = stmt.ColumnText(6);
    rows.push_back(std::move(row));
  }
  return rows;
}

absl::StatusOr<int64_t> EvidenceStore::Count(
    const EvidenceFilter& filter) const {
  RETURN_IF_ERROR(CheckFilter(db_->path(), filter));
  ASSIGN_OR_RETURN(
      Statement stmt,
      db_->Prepare(absl::StrCat("SELECT COUNT(*) FROM (SELECT 1 FROM evidence",
                                WhereClause(filter), " LIMIT ?4)")));
  RETURN_IF_ERROR(BindFilter(filter, stmt));
  ASSIGN_OR_RETURN(const bool has_row, stmt.Step());
  CHECK(has_row);  // COUNT(*) always yields one row
  return stmt.ColumnInt64(0);
}

absl::StatusOr<VerifyReport> EvidenceStore::Verify(const std::string& path) {
  std::unique_ptr<WalCopy> copy;  // outlives db
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, OpenForReading(path, &copy));
  RETURN_IF_ERROR(copy->Rename(CheckVerifiable(*db, path)));

  // One statement: one read snapshot, even while another process appends.
  ASSIGN_OR_RETURN(
      Statement stmt,
      db->Prepare("SELECT seq, kind, campaign, ts_us, body, prev_hash, hash, "
                  "typeof(kind), typeof(campaign), typeof(ts_us), "
                  "typeof(body), typeof(prev_hash), typeof(hash) "
                  "FROM evidence ORDER BY seq"));
  VerifyReport report;
  std::string prev_hash = ZeroHash();
  int64_t expected_seq = 1;
  while (true) {
    ASSIGN_OR_RETURN(const bool has_row, stmt.Step());
    if (!has_row) break;
    if (std::string problem = RowProblem(stmt, expected_seq, prev_hash);
        !problem.empty()) {
      report.first_bad_seq = expected_seq;
      report.problem = absl::StrCat("seq ", expected_seq, ": ", problem);
      return report;
    }
    prev_hash = stmt.ColumnText(6);
    ++expected_seq;
    ++report.rows_checked;
  }
  report.ok = true;
  return report;
}

std::string EvidenceStore::CanonicalEncoding(int64_t seq,
                                             const EvidenceRecord& r) {
  absl::StatusOr<std::string> body = DumpBody(r.body);
  CHECK(body.ok()) << body.status();
  return CanonicalText(seq, r.kind, r.campaign, r.ts_us, *body);
}

std::string EvidenceStore::RowHash(const std::string& prev_hash, int64_t seq,
                                   const EvidenceRecord& r) {
  return HashOf(prev_hash, CanonicalEncoding(seq, r));
}

}  // namespace kvcanary::storage
