// The evidence database's schema and its migrations
// (docs/evidence-store.md), and the SQLite steps the store and Verify share
// around them: a file's identity and schema version, opening a file for
// reading only, one-row queries and transactions. Internal to
// storage/evidence_store.h.
#ifndef KVCANARY_STORAGE_EVIDENCE_SCHEMA_H_
#define KVCANARY_STORAGE_EVIDENCE_SCHEMA_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/sqlite_db.h"
#include "storage/wal_copy.h"

namespace kvcanary::storage::evidence_internal {

// The one int64 `sql` returns; kInternal if it returns no row.
absl::StatusOr<int64_t> QueryInt64(SqliteDb& db, absl::string_view sql);

// Runs `body` between BEGIN IMMEDIATE and COMMIT; rolls back if either
// fails. IMMEDIATE takes the write lock first, so what `body` reads cannot
// change under it.
absl::Status InTransaction(SqliteDb& db,
                           const std::function<absl::Status()>& body);

// Checks that `db` is a kvcanary evidence database and returns its schema
// version. With `allow_fresh`, a file with no schema at all (new or empty)
// passes as version 0.
absl::StatusOr<int64_t> CheckIdentity(SqliteDb& db, bool allow_fresh);

// Opens `path` read-only (works on read-only media; writes nothing), through
// a private copy when it has a -wal without a -shm (storage/wal_copy.h).
// `*copy` must outlive the connection.
absl::StatusOr<std::unique_ptr<SqliteDb>> OpenForReading(
    const std::string& path, std::unique_ptr<WalCopy>* copy);

}  // namespace kvcanary::storage::evidence_internal

#endif  // KVCANARY_STORAGE_EVIDENCE_SCHEMA_H_
