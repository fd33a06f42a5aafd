#include "storage/merkle.h"

#include <openssl/sha.h>

#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace kvcanary::storage {
namespace {

bool IsPowerOfTwo(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

int Log2(uint64_t power_of_two) { return __builtin_ctzll(power_of_two); }

absl::Status Mismatch(absl::string_view what) {
  return absl::DataLossError(what);
}

}  // namespace

MerkleHash MerkleLeafHash(absl::string_view leaf_data) {
  std::string input;  // 0x00 || data
  input.reserve(1 + leaf_data.size());
  input.push_back('\0');
  input.append(leaf_data.data(), leaf_data.size());
  MerkleHash out;
  SHA256(reinterpret_cast<const unsigned char*>(input.data()), input.size(),
         out.data());
  return out;
}

MerkleHash MerkleNodeHash(const MerkleHash& left, const MerkleHash& right) {
  unsigned char input[1 + 2 * 32];  // 0x01 || left || right
  input[0] = 0x01;
  std::memcpy(input + 1, left.data(), 32);
  std::memcpy(input + 33, right.data(), 32);
  MerkleHash out;
  SHA256(input, sizeof input, out.data());
  return out;
}

MerkleHash MerkleEmptyRoot() {
  MerkleHash out;
  SHA256(reinterpret_cast<const unsigned char*>(""), 0, out.data());
  return out;
}

std::string MerkleHashBytes(const MerkleHash& h) {
  return std::string(reinterpret_cast<const char*>(h.data()), h.size());
}

std::string MerkleHashHex(const MerkleHash& h) {
  return absl::BytesToHexString(MerkleHashBytes(h));
}

absl::StatusOr<MerkleHash> MerkleHashFromBytes(absl::string_view bytes) {
  if (bytes.size() != 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("a hash is 32 bytes, not ", bytes.size()));
  }
  MerkleHash out;
  std::memcpy(out.data(), bytes.data(), 32);
  return out;
}

absl::StatusOr<MerkleHash> MerkleHashFromHex(absl::string_view hex) {
  if (hex.size() != 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("a hash is 64 hex characters, not ", hex.size()));
  }
  for (const char c : hex) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError("a hash is hex digits only");
    }
  }
  return MerkleHashFromBytes(absl::HexStringToBytes(hex));
}

uint64_t MerkleSplit(uint64_t n) {
  CHECK_GE(n, 2u);
  uint64_t k = uint64_t{1} << (63 - __builtin_clzll(n));
  if (k == n) k >>= 1;
  return k;
}

MerkleHash MerkleRootOf(absl::Span<const MerkleHash> leaf_hashes) {
  if (leaf_hashes.empty()) return MerkleEmptyRoot();
  // stack[i] holds a complete subtree of sizes[i] leaves; sizes strictly
  // decrease, so the stack is the binary representation of the count.
  std::vector<MerkleHash> stack;
  std::vector<uint64_t> sizes;
  for (const MerkleHash& leaf : leaf_hashes) {
    stack.push_back(leaf);
    sizes.push_back(1);
    while (sizes.size() >= 2 &&
           sizes[sizes.size() - 1] == sizes[sizes.size() - 2]) {
      const MerkleHash right = stack.back();
      stack.pop_back();
      sizes.pop_back();
      stack.back() = MerkleNodeHash(stack.back(), right);
      sizes.back() *= 2;
    }
  }
  // The incomplete right edge: fold from the smallest subtree up, which is
  // exactly RFC 6962's split at the largest power of two.
  MerkleHash root = stack.back();
  for (size_t i = stack.size() - 1; i-- > 0;) {
    root = MerkleNodeHash(stack[i], root);
  }
  return root;
}

// --- MerkleTree ----------------------------------------------------------

MerkleTree::MerkleTree(std::vector<MerkleHash> leaf_hashes) {
  levels_.push_back(std::move(leaf_hashes));
  while (levels_.back().size() >= 2) {
    const std::vector<MerkleHash>& below = levels_.back();
    std::vector<MerkleHash> level(below.size() / 2);
    for (size_t i = 0; i < level.size(); ++i) {
      level[i] = MerkleNodeHash(below[2 * i], below[2 * i + 1]);
    }
    levels_.push_back(std::move(level));
  }
}

MerkleHash MerkleTree::Range(uint64_t lo, uint64_t hi) const {
  const uint64_t n = hi - lo;
  if (IsPowerOfTwo(n) && lo % n == 0) {
    return levels_[Log2(n)][lo >> Log2(n)];
  }
  const uint64_t k = MerkleSplit(n);
  return MerkleNodeHash(Range(lo, lo + k), Range(lo + k, hi));
}

absl::StatusOr<MerkleHash> MerkleTree::Root(uint64_t tree_size) const {
  if (tree_size > size()) {
    return absl::OutOfRangeError(absl::StrCat(
        "tree size ", tree_size, " is past the log's ", size(), " leaves"));
  }
  if (tree_size == 0) return MerkleEmptyRoot();
  return Range(0, tree_size);
}

MerkleHash MerkleTree::Root() const { return *Root(size()); }

void MerkleTree::Path(uint64_t index, uint64_t lo, uint64_t hi,
                      std::vector<MerkleHash>* out) const {
  if (hi - lo == 1) return;
  const uint64_t k = MerkleSplit(hi - lo);
  if (index < lo + k) {
    Path(index, lo, lo + k, out);
    out->push_back(Range(lo + k, hi));
  } else {
    Path(index, lo + k, hi, out);
    out->push_back(Range(lo, lo + k));
  }
}

absl::StatusOr<std::vector<MerkleHash>> MerkleTree::InclusionProof(
    uint64_t index, uint64_t tree_size) const {
  if (tree_size > size() || index >= tree_size) {
    return absl::OutOfRangeError(
        absl::StrCat("no leaf ", index, " in a tree of ", tree_size,
                     " leaves (the log has ", size(), ")"));
  }
  std::vector<MerkleHash> proof;
  Path(index, 0, tree_size, &proof);
  return proof;
}

// SUBPROOF(m, D[lo:hi], complete) of RFC 6962 2.1.2, m counted from lo.
void MerkleTree::Subproof(uint64_t m, uint64_t lo, uint64_t hi, bool complete,
                          std::vector<MerkleHash>* out) const {
  const uint64_t n = hi - lo;
  if (m == n) {
    if (!complete) out->push_back(Range(lo, hi));
    return;
  }
  const uint64_t k = MerkleSplit(n);
  if (m <= k) {
    Subproof(m, lo, lo + k, complete, out);
    out->push_back(Range(lo + k, hi));
  } else {
    Subproof(m - k, lo + k, hi, false, out);
    out->push_back(Range(lo, lo + k));
  }
}

absl::StatusOr<std::vector<MerkleHash>> MerkleTree::ConsistencyProof(
    uint64_t old_size, uint64_t new_size) const {
  if (new_size > size() || old_size > new_size) {
    return absl::OutOfRangeError(
        absl::StrCat("no consistency proof from size ", old_size, " to ",
                     new_size, " (the log has ", size(), " leaves)"));
  }
  std::vector<MerkleHash> proof;
  if (old_size == 0 || old_size == new_size) return proof;
  Subproof(old_size, 0, new_size, true, &proof);
  return proof;
}

// --- Verification (RFC 9162) ---------------------------------------------

absl::Status VerifyInclusion(uint64_t index, uint64_t tree_size,
                             const MerkleHash& leaf_hash,
                             absl::Span<const MerkleHash> proof,
                             const MerkleHash& root) {
  if (index >= tree_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "leaf index ", index, " is not below the tree size ", tree_size));
  }
  uint64_t fn = index;
  uint64_t sn = tree_size - 1;
  MerkleHash r = leaf_hash;
  for (const MerkleHash& p : proof) {
    if (sn == 0) return Mismatch("inclusion proof is too long");
    if ((fn & 1) == 1 || fn == sn) {
      r = MerkleNodeHash(p, r);
      if ((fn & 1) == 0) {
        while ((fn & 1) == 0 && fn != 0) {
          fn >>= 1;
          sn >>= 1;
        }
      }
    } else {
      r = MerkleNodeHash(r, p);
    }
    fn >>= 1;
    sn >>= 1;
  }
  if (sn != 0) return Mismatch("inclusion proof is too short");
  if (r != root) {
    return Mismatch(absl::StrCat("inclusion proof leads to root ",
                                 MerkleHashHex(r), ", not ",
                                 MerkleHashHex(root)));
  }
  return absl::OkStatus();
}

absl::Status VerifyConsistency(uint64_t old_size, uint64_t new_size,
                               const MerkleHash& old_root,
                               const MerkleHash& new_root,
                               absl::Span<const MerkleHash> proof) {
  if (old_size > new_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "old size ", old_size, " is larger than the new size ", new_size));
  }
  if (old_size == new_size) {
    if (!proof.empty()) return Mismatch("consistency proof must be empty");
    if (old_root != new_root) {
      return Mismatch("the two roots of one tree size differ");
    }
    return absl::OkStatus();
  }
  if (old_size == 0) {
    if (!proof.empty()) return Mismatch("consistency proof must be empty");
    return absl::OkStatus();  // the empty tree is a prefix of every tree
  }
  if (proof.empty()) return Mismatch("consistency proof is empty");
  std::vector<MerkleHash> path;
  if (IsPowerOfTwo(old_size)) path.push_back(old_root);
  path.insert(path.end(), proof.begin(), proof.end());
  uint64_t fn = old_size - 1;
  uint64_t sn = new_size - 1;
  while ((fn & 1) == 1) {
    fn >>= 1;
    sn >>= 1;
  }
  MerkleHash fr = path[0];
  MerkleHash sr = path[0];
  for (size_t i = 1; i < path.size(); ++i) {
    const MerkleHash& c = path[i];
    if (sn == 0) return Mismatch("consistency proof is too long");
    if ((fn & 1) == 1 || fn == sn) {
      fr = MerkleNodeHash(c, fr);
      sr = MerkleNodeHash(c, sr);
      if ((fn & 1) == 0) {
        while ((fn & 1) == 0 && fn != 0) {
          fn >>= 1;
          sn >>= 1;
        }
      }
    } else {
      sr = MerkleNodeHash(sr, c);
    }
    fn >>= 1;
    sn >>= 1;
  }
  if (sn != 0) return Mismatch("consistency proof is too short");
  if (fr != old_root) {
    return Mismatch(
        absl::StrCat("consistency proof does not lead to the old root ",
                     MerkleHashHex(old_root)));
  }
  if (sr != new_root) {
    return Mismatch(
        absl::StrCat("consistency proof does not lead to the new root ",
                     MerkleHashHex(new_root)));
  }
  return absl::OkStatus();
}

}  // namespace kvcanary::storage
