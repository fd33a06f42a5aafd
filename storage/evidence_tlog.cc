#include "storage/evidence_tlog.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "common/status_macros.h"

namespace kvcanary::storage {
namespace {

namespace fs = std::filesystem;

constexpr char kCheckpointPrefix[] = "checkpoint-";
constexpr char kLeavesFile[] = "leaves.bin";
constexpr size_t kListedRows = 10;  // seqs named in one description

// --- The checkpoint directory ----------------------------------------------

// checkpoint-<size> files of `dir`, by size. A file is one checkpoint.
absl::StatusOr<std::vector<std::string>> CheckpointFiles(
    const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!fs::exists(path, ec)) {
      return absl::NotFoundError(absl::StrCat(path, ": no such checkpoint"));
    }
    return std::vector<std::string>{path};
  }
  std::map<uint64_t, std::string> by_size;
  for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
    const std::string name = e.path().filename().string();
    uint64_t size = 0;
    if (absl::StartsWith(name, kCheckpointPrefix) &&
        absl::SimpleAtoi(name.substr(sizeof(kCheckpointPrefix) - 1), &size)) {
      by_size[size] = e.path().string();
    }
  }
  if (ec) return absl::InternalError(absl::StrCat(path, ": ", ec.message()));
  if (by_size.empty()) {
    return absl::NotFoundError(
        absl::StrCat(path, ": no checkpoint-<size> files"));
  }
  std::vector<std::string> out;
  for (auto& [size, file] : by_size) out.push_back(std::move(file));
  return out;
}

// leaves.bin beside `checkpoint_file`, if present and a whole number of
// hashes; empty otherwise.
std::vector<MerkleHash> ReadLeavesBeside(const std::string& checkpoint_file) {
  const fs::path file = fs::path(checkpoint_file).parent_path() / kLeavesFile;
  absl::StatusOr<std::string> bytes = ReadFile(file.string());
  if (!bytes.ok() || bytes->size() % 32 != 0) return {};
  std::vector<MerkleHash> leaves(bytes->size() / 32);
  for (size_t i = 0; i < leaves.size(); ++i) {
    leaves[i] =
        *MerkleHashFromBytes(absl::string_view(*bytes).substr(32 * i, 32));
  }
  return leaves;
}

absl::StatusOr<MerkleTree> BuildTree(const EvidenceStore& store) {
  ASSIGN_OR_RETURN(std::vector<MerkleHash> leaves, EvidenceLeafHashes(store));
  return MerkleTree(std::move(leaves));
}

std::string ListSeqs(const std::vector<int64_t>& seqs) {
  std::vector<int64_t> shown(seqs.begin(),
                             seqs.begin() + std::min(seqs.size(), kListedRows));
  return absl::StrCat(absl::StrJoin(shown, ", "),
                      seqs.size() > kListedRows ? ", ..." : "");
}

// --- Diagnosis ------------------------------------------------------------

struct Matcher {
  absl::Span<const MerkleHash> c;      // signed leaves
  const std::vector<StoredRow>& rows;  // the log now
  std::vector<MerkleHash> stored;      // leaf of each row under its own seq

  // Does row j hold what signed leaf i held (under seq i+1)?
  bool Holds(uint64_t i, uint64_t j) const {
    if (rows[j].seq == static_cast<int64_t>(i + 1)) return stored[j] == c[i];
    return MerkleLeafHash(rows[j].LeafData(static_cast<int64_t>(i + 1))) ==
           c[i];
  }
  // Positions (from, to) all match, except `skip`.
  bool SameFrom(uint64_t from, uint64_t to, uint64_t skip) const {
    for (uint64_t i = from; i < to; ++i) {
      if (i != skip && stored[i] != c[i]) return false;
    }
    return true;
  }
};

CheckpointVerdict Verdict(std::string what, int64_t first, int64_t missing,
                          std::string description) {
  CheckpointVerdict v;
  v.what = std::move(what);
  v.first_diverging_row = first;
  v.rows_missing = missing;
  v.description = std::move(description);
  return v;
}

// Rows only deleted (and maybe the rest renumbered): align greedily.
std::optional<CheckpointVerdict> AsDeletion(const Matcher& m) {
  const uint64_t n = m.c.size(), d = m.rows.size();
  std::vector<int64_t> missing;
  uint64_t j = 0, renumbered = 0, last_match = 0;
  bool any_match_after_gap = false;
  for (uint64_t i = 0; i < n; ++i) {
    if (j < d && m.Holds(i, j)) {
      if (m.rows[j].seq != static_cast<int64_t>(i + 1)) ++renumbered;
      if (!missing.empty()) any_match_after_gap = true;
      last_match = i;
      ++j;
    } else {
      missing.push_back(static_cast<int64_t>(i + 1));
    }
  }
  if (missing.empty()) return std::nullopt;
  const bool cut = j == d && missing.back() == static_cast<int64_t>(n);
  if (!any_match_after_gap ||
      (missing.back() > static_cast<int64_t>(last_match + 1) && !cut)) {
    return std::nullopt;  // not a pattern of deletions
  }
  std::string description = absl::StrCat(
      missing.size(), " of the ", n, " rows the checkpoint signed are missing",
      " (seq ", ListSeqs(missing), ")");
  if (renumbered > 0) {
    absl::StrAppend(&description, "; ", renumbered,
                    " later rows were renumbered and the hash chain re-hashed "
                    "to hide the gap");
  }
  return Verdict(renumbered > 0 ? "deleted_rehashed" : "deleted", missing[0],
                 static_cast<int64_t>(missing.size()), description);
}

}  // namespace

CheckpointVerdict DiagnoseDivergence(absl::Span<const MerkleHash> signed_leaves,
                                     const std::vector<StoredRow>& rows) {
  Matcher m{signed_leaves, rows, {}};
  for (const StoredRow& r : rows)
    m.stored.push_back(MerkleLeafHash(r.LeafData()));
  const uint64_t n = signed_leaves.size(), d = rows.size();
  const uint64_t both = std::min(n, d);
  uint64_t f = 0;
  while (f < both && m.stored[f] == signed_leaves[f]) ++f;
  if (f == n) {
    CheckpointVerdict v = Verdict("intact", 0, 0, "");
    v.ok = true;
    return v;
  }
  const int64_t row = static_cast<int64_t>(f + 1);
  if (f == d) {
    return Verdict("truncated", row, static_cast<int64_t>(n - d),
                   absl::StrCat("the log was cut after row ", d, ": rows ",
                                d + 1, "..", n, " (", n - d,
                                " rows) that the checkpoint signed are gone"));
  }
  if (d >= n && m.SameFrom(f + 1, n, n)) {
    return Verdict("edited", row, 0,
                   absl::StrCat("row ", row,
                                " was edited: its contents differ "
                                "from what the checkpoint signed"));
  }
  for (uint64_t k = f + 1; k < both; ++k) {
    if (!m.Holds(k, f)) continue;
    if (m.Holds(f, k) && d >= n && m.SameFrom(f + 1, n, k)) {
      return Verdict(
          "swapped", row, 0,
          absl::StrCat("rows ", row, " and ", k + 1, " were swapped"));
    }
    break;
  }
  if (std::optional<CheckpointVerdict> v = AsDeletion(m)) return *v;
  uint64_t differ = n - both;
  for (uint64_t i = f; i < both; ++i) differ += m.stored[i] != signed_leaves[i];
  return Verdict("diverged", row, n > d ? static_cast<int64_t>(n - d) : 0,
                 absl::StrCat("the log differs from the checkpoint from row ",
                              row, " on: ", differ, " of its ", n,
                              " signed rows are not in place"));
}

absl::StatusOr<std::vector<StoredRow>> ReadStoredRows(
    const EvidenceStore& store) {
  std::vector<StoredRow> rows;
  RETURN_IF_ERROR(store.ForEachStoredRow([&](const StoredRow& r) {
    rows.push_back(r);
    return absl::OkStatus();
  }));
  return rows;
}

absl::StatusOr<std::vector<MerkleHash>> EvidenceLeafHashes(
    const EvidenceStore& store) {
  std::vector<MerkleHash> leaves;
  RETURN_IF_ERROR(store.ForEachStoredRow([&](const StoredRow& r) {
    leaves.push_back(MerkleLeafHash(r.LeafData()));
    return absl::OkStatus();
  }));
  return leaves;
}

absl::StatusOr<InclusionProofResult> ProveInclusion(const EvidenceStore& store,
                                                    int64_t seq,
                                                    uint64_t tree_size) {
  ASSIGN_OR_RETURN(const std::vector<StoredRow> rows, ReadStoredRows(store));
  if (seq < 1 || static_cast<uint64_t>(seq) > rows.size()) {
    return absl::OutOfRangeError(absl::StrCat(
        store.path(), ": no row ", seq, " (the log has ", rows.size(), ")"));
  }
  if (rows[seq - 1].seq != seq) {
    return absl::DataLossError(absl::StrCat(store.path(), ": row ", seq,
                                            " is not leaf ", seq - 1,
                                            " (seqs have a gap): run verify"));
  }
  std::vector<MerkleHash> leaves;
  leaves.reserve(rows.size());
  for (const StoredRow& r : rows)
    leaves.push_back(MerkleLeafHash(r.LeafData()));
  const MerkleTree tree(std::move(leaves));
  InclusionProofResult out;
  out.seq = seq;
  out.leaf_index = static_cast<uint64_t>(seq - 1);
  out.tree_size = tree_size == 0 ? tree.size() : tree_size;
  ASSIGN_OR_RETURN(out.proof,
                   tree.InclusionProof(out.leaf_index, out.tree_size));
  ASSIGN_OR_RETURN(out.root, tree.Root(out.tree_size));
  out.leaf_hash = tree.leaf(out.leaf_index);
  return out;
}

absl::StatusOr<ConsistencyProofResult> ProveConsistency(
    const EvidenceStore& store, uint64_t old_size, uint64_t new_size) {
  ASSIGN_OR_RETURN(const MerkleTree tree, BuildTree(store));
  ConsistencyProofResult out;
  out.old_size = old_size;
  out.new_size = new_size == 0 ? tree.size() : new_size;
  ASSIGN_OR_RETURN(out.proof, tree.ConsistencyProof(old_size, out.new_size));
  ASSIGN_OR_RETURN(out.old_root, tree.Root(old_size));
  ASSIGN_OR_RETURN(out.new_root, tree.Root(out.new_size));
  return out;
}

absl::StatusOr<WrittenCheckpoint> WriteCheckpoint(
    const EvidenceStore& store, const Ed25519Key& key,
    const std::string& origin, const std::vector<std::string>& dirs) {
  if (dirs.empty()) {
    return absl::InvalidArgumentError("no checkpoint directory given");
  }
  if (!IsNoteKeyName(origin)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "origin '", origin, "' must be non-empty, without spaces or '+'"));
  }
  ASSIGN_OR_RETURN(const VerifyReport chain,
                   EvidenceStore::Verify(store.path()));
  if (!chain.ok) {
    return absl::DataLossError(
        absl::StrCat(store.path(),
                     ": hash chain broken, refusing to sign: ", chain.problem));
  }
  ASSIGN_OR_RETURN(const MerkleTree tree, BuildTree(store));
  for (const std::string& dir : dirs) {
    absl::StatusOr<std::vector<std::string>> old = CheckpointFiles(dir);
    if (!old.ok()) continue;  // none yet
    for (const std::string& file : *old) {
      ASSIGN_OR_RETURN(const std::string bytes, ReadFile(file));
      absl::StatusOr<Checkpoint> prev = OpenCheckpoint(bytes, key);
      if (!prev.ok()) continue;  // another key's, or not ours to honour
      absl::StatusOr<MerkleHash> root = tree.Root(prev->tree_size);
      if (!root.ok() || *root != prev->root) {
        return absl::DataLossError(absl::StrCat(
            store.path(), ": the log is not consistent with ", file, " (size ",
            prev->tree_size, "); refusing to sign: run verify"));
      }
    }
  }
  WrittenCheckpoint out;
  out.checkpoint.origin = origin;
  out.checkpoint.tree_size = tree.size();
  out.checkpoint.root = tree.Root();
  ASSIGN_OR_RETURN(out.note, SignCheckpoint(out.checkpoint, key));
  std::string leaves;
  leaves.reserve(32 * tree.size());
  for (const MerkleHash& h : tree.leaves()) leaves += MerkleHashBytes(h);
  for (const std::string& dir : dirs) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
      return absl::PermissionDeniedError(absl::StrCat(dir, ": ", ec.message()));
    const std::string path =
        (fs::path(dir) / absl::StrCat(kCheckpointPrefix, tree.size())).string();
    RETURN_IF_ERROR(WriteFileAtomically((fs::path(dir) / kLeavesFile).string(),
                                        leaves, 0644));
    RETURN_IF_ERROR(WriteFileAtomically(path, out.note, 0644));
    out.paths.push_back(path);
  }
  return out;
}

namespace {

// One checkpoint against the log's tree; diagnosed only when `diagnose`.
CheckpointVerdict Check(const std::string& file, const Ed25519Key& key,
                        const MerkleTree& tree,
                        const std::vector<StoredRow>* rows) {
  CheckpointVerdict v;
  v.path = file;
  absl::StatusOr<std::string> bytes = ReadFile(file);
  absl::StatusOr<Checkpoint> c =
      bytes.ok() ? OpenCheckpoint(*bytes, key) : bytes.status();
  if (!c.ok()) {
    v.what = "bad_signature";
    v.description =
        absl::StrCat("checkpoint not trusted: ", c.status().message());
    return v;
  }
  const uint64_t n = c->tree_size;
  absl::StatusOr<MerkleHash> root = tree.Root(n);
  if (root.ok() && *root == c->root) {
    v.ok = true;
    v.checkpoint = *c;
    v.what = "intact";
    return v;
  }
  const std::vector<MerkleHash> leaves = ReadLeavesBeside(file);
  if (rows != nullptr && leaves.size() >= n) {
    const MerkleTree signed_tree(
        std::vector<MerkleHash>(leaves.begin(), leaves.begin() + n));
    if (signed_tree.Root() == c->root) {
      v = DiagnoseDivergence(signed_tree.leaves(), *rows);
      v.path = file;
      v.checkpoint = *c;
      return v;
    }
  }
  v.checkpoint = *c;
  v.what = n > tree.size() ? "truncated" : "diverged";
  v.rows_missing = n > tree.size() ? static_cast<int64_t>(n - tree.size()) : 0;
  v.description = absl::StrCat(
      "the log's first ", n, " rows do not hash to the signed root",
      n > tree.size() ? absl::StrCat(" (the log has only ", tree.size(), ")")
                      : "",
      leaves.empty() ? "; no leaves.bin to name the row"
                     : "; leaves.bin does not match the signed root, ignored");
  return v;
}

}  // namespace

absl::StatusOr<TlogVerifyReport> VerifyAgainstCheckpoints(
    const std::string& db_path, const std::string& checkpoint_path,
    const Ed25519Key& public_key) {
  ASSIGN_OR_RETURN(const std::vector<std::string> files,
                   CheckpointFiles(checkpoint_path));
  TlogVerifyReport report;
  ASSIGN_OR_RETURN(report.chain, EvidenceStore::Verify(db_path));
  ASSIGN_OR_RETURN(const std::unique_ptr<EvidenceStore> store,
                   EvidenceStore::OpenReadOnly(db_path));
  ASSIGN_OR_RETURN(const std::vector<StoredRow> rows, ReadStoredRows(*store));
  std::vector<MerkleHash> leaves;
  leaves.reserve(rows.size());
  for (const StoredRow& r : rows)
    leaves.push_back(MerkleLeafHash(r.LeafData()));
  const MerkleTree tree(std::move(leaves));
  report.log_rows = static_cast<int64_t>(rows.size());
  report.ok = report.chain.ok;
  uint64_t intact_size = 0;
  bool diagnosed = false;
  // Largest first, so the one diagnosis spent goes to the newest checkpoint.
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    CheckpointVerdict v =
        Check(*it, public_key, tree, diagnosed ? nullptr : &rows);
    if (!v.ok && v.what != "bad_signature") diagnosed = true;
    if (v.ok) intact_size = std::max(intact_size, v.checkpoint.tree_size);
    report.ok = report.ok && v.ok;
    report.checkpoints.insert(report.checkpoints.begin(), std::move(v));
  }
  report.rows_after_checkpoint =
      report.log_rows - static_cast<int64_t>(intact_size);
  return report;
}

}  // namespace kvcanary::storage
