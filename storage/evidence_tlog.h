// The evidence store as a verifiable log: an RFC 6962 Merkle tree over the
// evidence rows (storage/merkle.h), signed C2SP checkpoints of it
// (storage/signed_note.h), proofs, and verification against checkpoints.
//
// Leaves. Leaf i (0-based) is the i-th row in seq order; its leaf data is
// StoredRow::LeafData(), which for every row Append wrote is exactly
// EvidenceStore::CanonicalEncoding(seq, record), the bytes the hash chain
// covers. In an intact log row seq N is leaf N-1.
//
// Checkpoint directory. WriteCheckpoint writes into each directory:
//   checkpoint-<size>  the signed note (tlog-checkpoint body), one per size;
//   leaves.bin         the 32-byte leaf hashes of rows 1..size of the newest
//                      checkpoint, in order (32 * size bytes).
// leaves.bin is not signed itself; it is trusted for a checkpoint of size N
// only if the RFC 6962 root of its first N hashes equals the signed root, so
// an edited leaves.bin is ignored (and said to be), never believed. With it,
// verification names the first diverging row and what happened there;
// without it, only that the tree differs (and, with several checkpoints,
// between which sizes).
//
// What a checkpoint adds to the hash chain: the chain alone finds edits,
// swaps and deletions that left the chain unre-hashed, but a cut tail or a
// chain re-hashed after deleting rows passes it, since no secret is needed
// to re-hash. The signed root fixes the first N rows: any change to them,
// including a cut or a re-hash, changes the root.
#ifndef KVCANARY_STORAGE_EVIDENCE_TLOG_H_
#define KVCANARY_STORAGE_EVIDENCE_TLOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "storage/ed25519_key.h"
#include "storage/evidence_store.h"
#include "storage/merkle.h"
#include "storage/signed_note.h"

namespace kvcanary::storage {

// Every row as stored, in seq order.
absl::StatusOr<std::vector<StoredRow>> ReadStoredRows(
    const EvidenceStore& store);
// The leaf hashes of every row, in seq order (streamed: no rows kept).
absl::StatusOr<std::vector<MerkleHash>> EvidenceLeafHashes(
    const EvidenceStore& store);

struct InclusionProofResult {
  int64_t seq = 0;
  uint64_t leaf_index = 0;
  uint64_t tree_size = 0;
  MerkleHash leaf_hash{};
  MerkleHash root{};
  std::vector<MerkleHash> proof;
};
// The inclusion proof of row `seq` in the tree of the first `tree_size`
// rows (0: all rows). kOutOfRange for a row or size past the log;
// kDataLoss if row `seq` is not leaf seq-1 (a gap in the seqs: verify).
absl::StatusOr<InclusionProofResult> ProveInclusion(const EvidenceStore& store,
                                                    int64_t seq,
                                                    uint64_t tree_size = 0);

struct ConsistencyProofResult {
  uint64_t old_size = 0;
  uint64_t new_size = 0;
  MerkleHash old_root{};
  MerkleHash new_root{};
  std::vector<MerkleHash> proof;
};
absl::StatusOr<ConsistencyProofResult> ProveConsistency(
    const EvidenceStore& store, uint64_t old_size, uint64_t new_size);

struct WrittenCheckpoint {
  Checkpoint checkpoint;
  std::string note;                // the signed note's bytes
  std::vector<std::string> paths;  // one checkpoint file per directory
};
// Checks the hash chain, then builds the tree over every row, checks it is
// consistent with the newest checkpoint already in each directory that
// `key` signed (a log must never sign two inconsistent checkpoints), and
// writes leaves.bin and checkpoint-<size> into each directory (created if
// missing). kDataLoss, and nothing written, if the chain is broken or the
// log diverges from an earlier checkpoint; kInvalidArgument for a bad
// origin or no directory. REQUIRES: key.has_private().
absl::StatusOr<WrittenCheckpoint> WriteCheckpoint(
    const EvidenceStore& store, const Ed25519Key& key,
    const std::string& origin, const std::vector<std::string>& dirs);

// What one checkpoint says about the log.
struct CheckpointVerdict {
  std::string path;  // the checkpoint file
  bool ok = false;
  Checkpoint checkpoint;  // as signed (empty if the signature failed)
  // "intact", "bad_signature", "truncated", "edited", "swapped", "deleted",
  // "deleted_rehashed" (rows deleted and the chain renumbered and
  // re-hashed), "diverged" (none of these patterns; or no leaves.bin).
  std::string what;
  int64_t first_diverging_row = 0;  // seq; 0 when intact or unknown
  int64_t rows_missing = 0;         // signed rows not found in the log
  std::string description;          // one line for people
};

struct TlogVerifyReport {
  bool ok = false;       // chain intact and every checkpoint intact
  VerifyReport chain;    // EvidenceStore::Verify
  int64_t log_rows = 0;  // rows in the database
  std::vector<CheckpointVerdict> checkpoints;  // smallest size first
  // Rows past the largest intact checkpoint: covered by the chain only.
  int64_t rows_after_checkpoint = 0;
};

// Verifies the database at `db_path` (opened read-only) against the
// checkpoint file, or every checkpoint-* file of the directory,
// `checkpoint_path`, each checked with `public_key`. A tampered log or
// checkpoint is an OK status with report.ok false; errors only for what
// could not be read (no checkpoint found: kNotFound).
absl::StatusOr<TlogVerifyReport> VerifyAgainstCheckpoints(
    const std::string& db_path, const std::string& checkpoint_path,
    const Ed25519Key& public_key);

// What happened to a log whose first rows should hash to `signed_leaves`
// (trusted: their root is the signed one) given the rows now stored. Names
// the pattern (see CheckpointVerdict::what) and the first diverging row.
CheckpointVerdict DiagnoseDivergence(absl::Span<const MerkleHash> signed_leaves,
                                     const std::vector<StoredRow>& rows);

}  // namespace kvcanary::storage

#endif  // KVCANARY_STORAGE_EVIDENCE_TLOG_H_
