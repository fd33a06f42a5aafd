// EvidenceStore's reads (storage/evidence_store.h): every row as stored, and
// the rows or the count that match a filter.
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "storage/evidence_store.h"

namespace kvcanary::storage {
namespace {

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

}  // namespace

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

}  // namespace kvcanary::storage
