// The evidence database's schema, its migrations (EvidenceStore::Migrate),
// and the SQLite steps around them (storage/evidence_schema.h).
#include "storage/evidence_schema.h"

#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "storage/evidence_store.h"

namespace kvcanary::storage {
namespace {

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

}  // namespace

namespace evidence_internal {

absl::StatusOr<int64_t> QueryInt64(SqliteDb& db, absl::string_view sql) {
  ASSIGN_OR_RETURN(Statement stmt, db.Prepare(sql));
  ASSIGN_OR_RETURN(const bool has_row, stmt.Step());
  if (!has_row) {
    return absl::InternalError(
        absl::StrCat(db.path(), ": `", sql, "` returned no row"));
  }
  return stmt.ColumnInt64(0);
}

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

}  // namespace evidence_internal

using evidence_internal::InTransaction;
using evidence_internal::QueryInt64;

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

}  // namespace kvcanary::storage
