// EvidenceStore::Verify (storage/evidence_store.h): recomputes an evidence
// database's whole chain, read-only, and names the first row that is
// missing, out of place, of the wrong form or does not hash to its stored
// hash.
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "storage/evidence_encoding.h"
#include "storage/evidence_schema.h"
#include "storage/evidence_store.h"

namespace kvcanary::storage {
namespace {

using evidence_internal::CanonicalText;
using evidence_internal::CheckIdentity;
using evidence_internal::DumpBody;
using evidence_internal::HashOf;
using evidence_internal::IsHashHex;
using evidence_internal::IsKind;
using evidence_internal::OpenForReading;
using evidence_internal::QueryInt64;
using evidence_internal::ZeroHash;

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

}  // namespace kvcanary::storage
