#include "storage/sqlite_db.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/status_macros.h"

namespace kvcanary {
namespace {

// quick_check reports up to 100 problems; a few are enough to act on.
constexpr size_t kMaxReportedProblems = 5;

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// A path as the file part of an SQLite URI: '%', '?' and '#' (which would
// end the path) percent-encoded, as SQLite's URI rules require.
std::string UriPath(const std::string& path) {
  std::string out;
  for (const char c : path) {
    if (c == '%' || c == '?' || c == '#') {
      absl::StrAppend(
          &out, "%", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

absl::Status StatusFromSqlite(int rc, absl::string_view message,
                              int system_errno) {
  CHECK(rc != SQLITE_OK && rc != SQLITE_ROW && rc != SQLITE_DONE)
      << "not an error code: " << rc;
  switch (rc & 0xff) {  // the primary code of an extended code
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(message);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(message);
    case SQLITE_CONSTRAINT:
      return absl::FailedPreconditionError(message);
    case SQLITE_CANTOPEN:
      if (system_errno == EACCES || system_errno == EPERM ||
          system_errno == EROFS) {
        return absl::PermissionDeniedError(message);
      }
      return absl::NotFoundError(message);
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

// --- Statement ---------------------------------------------------------------

Statement::Statement(sqlite3_stmt* stmt, const std::string* path)
    : stmt_(stmt), path_(path) {}

Statement::Statement(Statement&& other) noexcept
    : stmt_(std::exchange(other.stmt_, nullptr)),
      path_(other.path_),
      has_row_(std::exchange(other.has_row_, false)) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    stmt_ = std::exchange(other.stmt_, nullptr);
    path_ = other.path_;
    has_row_ = std::exchange(other.has_row_, false);
  }
  return *this;
}

Statement::~Statement() { sqlite3_finalize(stmt_); }  // no-op on null

absl::Status Statement::Error(int rc, absl::string_view what) const {
  sqlite3* db = sqlite3_db_handle(stmt_);
  return StatusFromSqlite(
      rc,
      absl::StrCat(*path_, ": ", what, ": ", sqlite3_errmsg(db), " (in `",
                   sqlite3_sql(stmt_), "`)"),
      sqlite3_system_errno(db));
}

absl::Status Statement::BindInt64(int index, int64_t value) {
  CHECK(stmt_ != nullptr);
  const int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK) return Error(rc, absl::StrCat("bind ?", index));
  return absl::OkStatus();
}

absl::Status Statement::BindText(int index, absl::string_view value) {
  CHECK(stmt_ != nullptr);
  // A null pointer would bind SQL NULL; the empty string is not NULL.
  const char* data = value.data() != nullptr ? value.data() : "";
  const int rc = sqlite3_bind_text64(stmt_, index, data, value.size(),
                                     SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK) return Error(rc, absl::StrCat("bind ?", index));
  return absl::OkStatus();
}

absl::Status Statement::BindBlob(int index, absl::string_view bytes) {
  CHECK(stmt_ != nullptr);
  const char* data = bytes.data() != nullptr ? bytes.data() : "";
  const int rc =
      sqlite3_bind_blob64(stmt_, index, data, bytes.size(), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) return Error(rc, absl::StrCat("bind ?", index));
  return absl::OkStatus();
}

absl::Status Statement::BindNull(int index) {
  CHECK(stmt_ != nullptr);
  const int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK) return Error(rc, absl::StrCat("bind ?", index));
  return absl::OkStatus();
}

absl::StatusOr<bool> Statement::Step() {
  CHECK(stmt_ != nullptr);
  const int rc = sqlite3_step(stmt_);
  has_row_ = rc == SQLITE_ROW;
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  absl::Status status = Error(rc, "step");
  // Release the locks a failed statement may still hold; the error is
  // already captured above (reset would only repeat it).
  sqlite3_reset(stmt_);
  return status;
}

void Statement::Reset() {
  CHECK(stmt_ != nullptr);
  // The return value repeats the last Step() error, already reported there.
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  has_row_ = false;
}

int Statement::column_count() const {
  CHECK(stmt_ != nullptr);
  return sqlite3_column_count(stmt_);
}

void Statement::CheckColumn(int column) const {
  CHECK(stmt_ != nullptr);
  CHECK(has_row_) << "column read without a row";
  CHECK_GE(column, 0);
  CHECK_LT(column, sqlite3_data_count(stmt_));
}

bool Statement::ColumnIsNull(int column) const {
  CheckColumn(column);
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

int64_t Statement::ColumnInt64(int column) const {
  CheckColumn(column);
  return sqlite3_column_int64(stmt_, column);
}

std::string Statement::ColumnText(int column) const {
  CheckColumn(column);
  // Pointer first, then size: the documented order for a stable size.
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  const int size = sqlite3_column_bytes(stmt_, column);
  if (text == nullptr) return std::string();
  return std::string(reinterpret_cast<const char*>(text), size);
}

std::string Statement::ColumnBlob(int column) const {
  CheckColumn(column);
  const void* blob = sqlite3_column_blob(stmt_, column);
  const int size = sqlite3_column_bytes(stmt_, column);
  if (blob == nullptr) return std::string();
  return std::string(static_cast<const char*>(blob), size);
}

// --- SqliteDb ----------------------------------------------------------------

SqliteDb::SqliteDb(sqlite3* db, std::string path)
    : db_(db), path_(std::move(path)) {}

// close_v2 defers the close until any still-live Statement is finalized.
SqliteDb::~SqliteDb() { sqlite3_close_v2(db_); }

absl::StatusOr<std::unique_ptr<SqliteDb>> SqliteDb::Open(
    const std::string& path, const OpenOptions& options) {
  int flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE;
  std::string name = path;
  bool immutable = false;
  if (options.read_only) {
    if (!Exists(path)) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    immutable = options.immutable_if_no_wal && !Exists(path + "-wal") &&
                !Exists(path + "-shm");
    flags |= SQLITE_OPEN_READONLY | SQLITE_OPEN_URI;
    name = absl::StrCat("file:", UriPath(path), "?mode=ro",
                        immutable ? "&immutable=1" : "");
  } else {
    flags |= SQLITE_OPEN_READWRITE;
    if (options.create_if_missing) flags |= SQLITE_OPEN_CREATE;
  }
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(name.c_str(), &raw, flags, nullptr);
  if (raw == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": out of memory opening the database"));
  }
  // Own the handle before anything can fail: open allocates one even on
  // error, and it must be closed.
  std::unique_ptr<SqliteDb> db(new SqliteDb(raw, path));
  db->read_only_ = options.read_only;
  db->immutable_ = immutable;
  if (rc != SQLITE_OK) return db->Error(rc, "cannot open");
  RETURN_IF_ERROR(db->Configure(options));
  return db;
}

absl::Status SqliteDb::Error(int rc, absl::string_view what) const {
  return StatusFromSqlite(
      rc, absl::StrCat(path_, ": ", what, ": ", sqlite3_errmsg(db_)),
      sqlite3_system_errno(db_));
}

absl::Status SqliteDb::Configure(const OpenOptions& options) {
  const int64_t busy_ms = absl::ToInt64Milliseconds(options.busy_timeout);
  sqlite3_busy_timeout(
      db_, static_cast<int>(std::clamp<int64_t>(busy_ms, 0, INT_MAX)));

  // First touch of the file: a non-database or a corrupt one fails here,
  // before any PRAGMA could write to it.
  RETURN_IF_ERROR(QuickCheck());
  if (read_only_) return absl::OkStatus();  // reads only: change nothing

  ASSIGN_OR_RETURN(const std::string journal_mode,
                   QueryPragma("PRAGMA journal_mode=WAL"));
  if (absl::AsciiStrToLower(journal_mode) != "wal") {
    return absl::FailedPreconditionError(absl::StrCat(
        path_, ": cannot enable WAL journal mode (got '", journal_mode, "')"));
  }
  RETURN_IF_ERROR(Exec("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;"));
  // Both PRAGMAs are silently ignored in some builds or states; verify.
  ASSIGN_OR_RETURN(const std::string synchronous,
                   QueryPragma("PRAGMA synchronous"));
  ASSIGN_OR_RETURN(const std::string foreign_keys,
                   QueryPragma("PRAGMA foreign_keys"));
  if (synchronous != "2" || foreign_keys != "1") {
    return absl::FailedPreconditionError(absl::StrCat(
        path_, ": PRAGMAs did not take effect: synchronous=", synchronous,
        " foreign_keys=", foreign_keys));
  }
  return absl::OkStatus();
}

absl::Status SqliteDb::QuickCheck() {
  const std::string corrupt = absl::StrCat(
      path_, ": not a kvcanary evidence database / file is corrupt: ");
  sqlite3_stmt* stmt = nullptr;
  std::vector<std::string> problems;
  int rc = sqlite3_prepare_v2(db_, "PRAGMA quick_check", -1, &stmt, nullptr);
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, 0);
      const std::string line =
          text != nullptr ? reinterpret_cast<const char*>(text) : "";
      if (line != "ok" && problems.size() < kMaxReportedProblems) {
        problems.push_back(line);
      }
    }
  }
  // Read the message before finalize, which may replace it.
  const std::string message = sqlite3_errmsg(db_);
  const int system_errno = sqlite3_system_errno(db_);
  sqlite3_finalize(stmt);
  if (rc != SQLITE_OK && rc != SQLITE_DONE) {
    absl::Status status = StatusFromSqlite(rc, message, system_errno);
    if (status.code() == absl::StatusCode::kDataLoss) {
      return absl::DataLossError(absl::StrCat(corrupt, message));
    }
    return StatusFromSqlite(
        rc, absl::StrCat(path_, ": integrity check: ", message), system_errno);
  }
  if (!problems.empty()) {
    return absl::DataLossError(
        absl::StrCat(corrupt, absl::StrJoin(problems, "; ")));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SqliteDb::QueryPragma(absl::string_view sql) {
  ASSIGN_OR_RETURN(Statement stmt, Prepare(sql));
  ASSIGN_OR_RETURN(const bool has_row, stmt.Step());
  if (!has_row) {
    return absl::InternalError(
        absl::StrCat(path_, ": `", sql, "` returned no row"));
  }
  return stmt.ColumnText(0);
}

absl::Status SqliteDb::Exec(absl::string_view sql) {
  const std::string terminated(sql);
  char* raw_message = nullptr;
  const int rc =
      sqlite3_exec(db_, terminated.c_str(), nullptr, nullptr, &raw_message);
  if (rc == SQLITE_OK) return absl::OkStatus();
  const std::string message =
      raw_message != nullptr ? raw_message : sqlite3_errmsg(db_);
  sqlite3_free(raw_message);
  return StatusFromSqlite(rc, absl::StrCat(path_, ": exec: ", message),
                          sqlite3_system_errno(db_));
}

absl::StatusOr<Statement> SqliteDb::Prepare(absl::string_view sql) {
  if (sql.size() > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": SQL text of ", sql.size(), " bytes"));
  }
  sqlite3_stmt* raw = nullptr;
  const char* tail = nullptr;
  const int rc = sqlite3_prepare_v2(db_, sql.data(),
                                    static_cast<int>(sql.size()), &raw, &tail);
  if (rc != SQLITE_OK) {
    return Error(rc, absl::StrCat("prepare `", sql, "`"));
  }
  Statement stmt(raw, &path_);
  if (raw == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": no SQL statement in `", sql, "`"));
  }
  const absl::string_view rest =
      sql.substr(static_cast<size_t>(tail - sql.data()));
  if (!absl::StripAsciiWhitespace(rest).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": Prepare takes one statement; trailing `", rest, "`"));
  }
  return stmt;
}

int64_t SqliteDb::LastInsertRowId() const {
  return sqlite3_last_insert_rowid(db_);
}

}  // namespace kvcanary
