// RFC 6962 Merkle tree hashing (section 2.1), the tree under kvcanary's
// verifiable evidence log (docs/evidence-store.md):
//   leaf hash  = SHA-256(0x00 || leaf data)
//   node hash  = SHA-256(0x01 || left || right)
//   MTH({})    = SHA-256("")
//   MTH(D[n])  = node hash of MTH(D[0:k]) and MTH(D[k:n]), k the largest
//                power of two smaller than n.
// Inclusion proofs are RFC 6962's PATH (2.1.1), consistency proofs its PROOF
// (2.1.2); both are verified with RFC 9162's algorithms (2.1.3.2, 2.1.4.2),
// which need no tree at all.
//
// In the evidence log, leaf i (0-based) is the i-th row in seq order and its
// leaf data is exactly EvidenceStore::CanonicalEncoding(seq, record): the
// bytes the hash chain already covers (storage/evidence_tlog.h).
#ifndef KVCANARY_STORAGE_MERKLE_H_
#define KVCANARY_STORAGE_MERKLE_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kvcanary::storage {

// One SHA-256 digest: a leaf hash, a node hash or a root. 32 raw bytes.
using MerkleHash = std::array<uint8_t, 32>;

MerkleHash MerkleLeafHash(absl::string_view leaf_data);
MerkleHash MerkleNodeHash(const MerkleHash& left, const MerkleHash& right);
// MTH of the empty tree: SHA-256 of the empty string.
MerkleHash MerkleEmptyRoot();

std::string MerkleHashHex(const MerkleHash& h);    // 64 lower-case hex chars
std::string MerkleHashBytes(const MerkleHash& h);  // the 32 raw bytes
// From 32 raw bytes; kInvalidArgument for any other length.
absl::StatusOr<MerkleHash> MerkleHashFromBytes(absl::string_view bytes);
absl::StatusOr<MerkleHash> MerkleHashFromHex(absl::string_view hex);

// The largest power of two strictly smaller than n. REQUIRES: n >= 2.
uint64_t MerkleSplit(uint64_t n);

// MTH over leaf hashes, in O(n) time and O(log n) memory (a stack of the
// complete subtrees so far). For one root when no proofs are needed.
MerkleHash MerkleRootOf(absl::Span<const MerkleHash> leaf_hashes);

// A whole tree held in memory: every level of complete, aligned subtrees
// (level k holds the roots of leaves [i*2^k, (i+1)*2^k)), about 2n hashes
// (64 MB at a million leaves). Building is O(n) hashes; the root at any
// size and every proof cost O(log n) hash computations.
// Immutable after construction; safe to share between threads.
class MerkleTree {
 public:
  explicit MerkleTree(std::vector<MerkleHash> leaf_hashes);

  uint64_t size() const { return levels_[0].size(); }
  const MerkleHash& leaf(uint64_t index) const { return levels_[0][index]; }
  const std::vector<MerkleHash>& leaves() const { return levels_[0]; }

  // MTH of the first `tree_size` leaves. kOutOfRange if tree_size > size().
  absl::StatusOr<MerkleHash> Root(uint64_t tree_size) const;
  MerkleHash Root() const;  // at size()

  // PATH(index, D[tree_size]). kOutOfRange unless index < tree_size <= size().
  absl::StatusOr<std::vector<MerkleHash>> InclusionProof(
      uint64_t index, uint64_t tree_size) const;
  // PROOF(old_size, D[new_size]): empty when old_size is 0 or equals
  // new_size. kOutOfRange unless old_size <= new_size <= size().
  absl::StatusOr<std::vector<MerkleHash>> ConsistencyProof(
      uint64_t old_size, uint64_t new_size) const;

 private:
  // MTH(D[lo:hi]). REQUIRES: lo < hi <= size().
  MerkleHash Range(uint64_t lo, uint64_t hi) const;
  void Path(uint64_t index, uint64_t lo, uint64_t hi,
            std::vector<MerkleHash>* out) const;
  void Subproof(uint64_t m, uint64_t lo, uint64_t hi, bool complete,
                std::vector<MerkleHash>* out) const;

  std::vector<std::vector<MerkleHash>> levels_;  // levels_[0]: the leaves
};

// RFC 9162 2.1.3.2. OK if `proof` proves that `leaf_hash` is leaf `index`
// of the tree of `tree_size` leaves whose root is `root`; kDataLoss naming
// what did not match otherwise (kInvalidArgument for index >= tree_size).
absl::Status VerifyInclusion(uint64_t index, uint64_t tree_size,
                             const MerkleHash& leaf_hash,
                             absl::Span<const MerkleHash> proof,
                             const MerkleHash& root);
// RFC 9162 2.1.4.2. OK if `proof` proves the tree of `old_size` leaves with
// root `old_root` is a prefix of the tree of `new_size` leaves with root
// `new_root`; kDataLoss otherwise (kInvalidArgument for old > new).
absl::Status VerifyConsistency(uint64_t old_size, uint64_t new_size,
                               const MerkleHash& old_root,
                               const MerkleHash& new_root,
                               absl::Span<const MerkleHash> proof);

}  // namespace kvcanary::storage

#endif  // KVCANARY_STORAGE_MERKLE_H_
