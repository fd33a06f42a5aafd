// The only place kvcanary touches the raw SQLite C API. SqliteDb owns one
// connection opened the way the evidence store needs it (WAL journal,
// synchronous=FULL, foreign keys on, an integrity check at open), and
// Statement wraps one prepared statement. Every SQLite error becomes an
// absl::Status once, in StatusFromSqlite. Guarantees: docs/evidence-store.md.
#ifndef KVCANARY_STORAGE_SQLITE_DB_H_
#define KVCANARY_STORAGE_SQLITE_DB_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

struct sqlite3;
struct sqlite3_stmt;

namespace kvcanary {

// Converts a SQLite result code (primary or extended) into a Status whose
// message is `message`:
//   SQLITE_BUSY, SQLITE_LOCKED     -> kUnavailable (another connection holds
//                                     the lock; retrying may succeed)
//   SQLITE_CORRUPT, SQLITE_NOTADB  -> kDataLoss
//   SQLITE_CONSTRAINT              -> kFailedPrecondition
//   SQLITE_CANTOPEN                -> kPermissionDenied if system_errno is
//                                     EACCES/EPERM/EROFS, else kNotFound
//   SQLITE_FULL, SQLITE_NOMEM      -> kResourceExhausted
//   anything else                  -> kInternal
// `system_errno` is sqlite3_system_errno() of the failing connection, or 0.
// REQUIRES: rc is an error code (not SQLITE_OK, SQLITE_ROW or SQLITE_DONE).
absl::Status StatusFromSqlite(int rc, absl::string_view message,
                              int system_errno = 0);

struct SqliteOpenOptions {
  // If false, opening a path that does not exist is kNotFound.
  bool create_if_missing = true;
  // How long a statement waits for another connection's lock before
  // failing with kUnavailable. Zero: fail at once.
  absl::Duration busy_timeout = absl::Seconds(5);
  // Open with SQLITE_OPEN_READONLY through the URI `file:PATH?mode=ro`,
  // adding `&immutable=1` when neither PATH-wal nor PATH-shm exists, so a
  // file on read-only media (where SQLite could not create them) opens too.
  // Nothing is written: no journal-mode or other PRAGMA changes, only the
  // integrity check. A missing file is kNotFound (create_if_missing is
  // ignored). Immutable means SQLite takes no locks and assumes nobody
  // writes: right for an archived file, which is what a file with no WAL is.
  bool read_only = false;
  // With read_only: whether immutable=1 may be used when no -wal/-shm
  // exist. Callers that know a writer may open the file meanwhile (an
  // evidence store's writer lock is held) pass false.
  bool immutable_if_no_wal = true;
};

class SqliteDb;

// One prepared SQL statement. Bind parameters are 1-based (as in SQL `?1`);
// columns are 0-based. Column getters are valid only after Step() returned
// true and until the next Step() or Reset().
// Not thread-safe. REQUIRES: does not outlive the SqliteDb that prepared it.
class Statement {
 public:
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  absl::Status BindInt64(int index, int64_t value);
  // Text and blobs are copied; the argument need not outlive the call.
  absl::Status BindText(int index, absl::string_view value);
  absl::Status BindBlob(int index, absl::string_view bytes);
  absl::Status BindNull(int index);

  // Runs the statement to its next row. Returns true if a row is available,
  // false once the statement is done; an error Status otherwise (e.g.
  // kFailedPrecondition for a constraint violation).
  absl::StatusOr<bool> Step();
  // Makes the statement ready to run again and clears all bindings.
  void Reset();

  int column_count() const;
  bool ColumnIsNull(int column) const;
  int64_t ColumnInt64(int column) const;
  std::string ColumnText(int column) const;
  // Blob bytes in a std::string (may hold NULs).
  std::string ColumnBlob(int column) const;

 private:
  friend class SqliteDb;
  Statement(sqlite3_stmt* stmt, const std::string* path);
  absl::Status Error(int rc, absl::string_view what) const;
  void CheckColumn(int column) const;

  sqlite3_stmt* stmt_;       // owned; null after a move
  const std::string* path_;  // the owning SqliteDb's path, for messages
  bool has_row_ = false;
};

// One connection to an evidence database file.
// Not thread-safe: use one SqliteDb per thread (SQLite serialises writers
// across connections; readers proceed concurrently under WAL).
class SqliteDb {
 public:
  using OpenOptions = SqliteOpenOptions;

  // With options.read_only: see SqliteOpenOptions::read_only.
  // Otherwise opens (or creates) the database at `path` with journal_mode=WAL,
  // synchronous=FULL, foreign_keys=ON and the given busy timeout, then runs
  // PRAGMA quick_check. Errors name the path:
  //   kDataLoss  "<path>: not a kvcanary evidence database / file is
  //              corrupt: ..." for a file that is not SQLite or fails the
  //              check;
  //   kNotFound / kPermissionDenied if the file cannot be opened;
  //   kFailedPrecondition if WAL cannot be enabled (e.g. ":memory:").
  static absl::StatusOr<std::unique_ptr<SqliteDb>> Open(
      const std::string& path, const OpenOptions& options = OpenOptions());

  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;
  ~SqliteDb();

  // Runs one or more `;`-separated statements that return no rows needed by
  // the caller (schema, BEGIN/COMMIT, PRAGMAs).
  absl::Status Exec(absl::string_view sql);

  // Prepares exactly one statement. kInvalidArgument if `sql` holds more
  // than one statement or none.
  absl::StatusOr<Statement> Prepare(absl::string_view sql);

  // Rowid of the most recent successful INSERT on this connection.
  int64_t LastInsertRowId() const;

  const std::string& path() const { return path_; }
  bool read_only() const { return read_only_; }
  // True when opened with immutable=1 (read-only, no -wal and no -shm).
  bool immutable() const { return immutable_; }

 private:
  SqliteDb(sqlite3* db, std::string path);
  absl::Status Error(int rc, absl::string_view what) const;
  // Runs a PRAGMA and returns its first column of its first row.
  absl::StatusOr<std::string> QueryPragma(absl::string_view sql);
  absl::Status Configure(const OpenOptions& options);
  absl::Status QuickCheck();

  sqlite3* db_;  // owned
  const std::string path_;
  bool read_only_ = false;
  bool immutable_ = false;
};

}  // namespace kvcanary

#endif  // KVCANARY_STORAGE_SQLITE_DB_H_
