#include "storage/merkle.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kvcanary::storage {
namespace {

// RFC 6962 reference data, as published by transparency-dev/merkle
// (testonly/constants.go) and Certificate Transparency: leaf inputs, the
// roots of every prefix, and node hashes of the complete subtrees.
const char* const kLeafInputs[] = {"",
                                   "00",
                                   "10",
                                   "2021",
                                   "3031",
                                   "40414243",
                                   "5051525354555657",
                                   "606162636465666768696a6b6c6d6e6f"};
const char* const kRoots[] = {
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"};

std::vector<MerkleHash> ReferenceLeaves() {
  std::vector<MerkleHash> out;
  for (const char* in : kLeafInputs) {
    out.push_back(MerkleLeafHash(absl::HexStringToBytes(in)));
  }
  return out;
}

std::vector<MerkleHash> SyntheticLeaves(int n) {
  std::vector<MerkleHash> out;
  for (int i = 0; i < n; ++i)
    out.push_back(MerkleLeafHash(absl::StrCat("leaf-", i)));
  return out;
}

// MTH straight from the RFC's recursive definition: the oracle.
MerkleHash ReferenceRoot(const std::vector<MerkleHash>& leaves, size_t lo,
                         size_t hi) {
  if (hi == lo) return MerkleEmptyRoot();
  if (hi - lo == 1) return leaves[lo];
  const size_t k = MerkleSplit(hi - lo);
  return MerkleNodeHash(ReferenceRoot(leaves, lo, lo + k),
                        ReferenceRoot(leaves, lo + k, hi));
}

TEST(MerkleTest, RootsMatchRfc6962ReferenceVectors) {
  const std::vector<MerkleHash> leaves = ReferenceLeaves();
  const MerkleTree tree(leaves);
  for (size_t n = 0; n <= leaves.size(); ++n) {
    EXPECT_EQ(MerkleHashHex(*tree.Root(n)), kRoots[n]) << "size " << n;
    EXPECT_EQ(
        MerkleHashHex(MerkleRootOf(absl::MakeConstSpan(leaves.data(), n))),
        kRoots[n])
        << "size " << n;
  }
}

TEST(MerkleTest, InclusionProofsMatchReferenceVectors) {
  const MerkleTree tree(ReferenceLeaves());
  struct Case {
    uint64_t index, size;
    std::vector<const char*> proof;
  };
  const Case cases[] = {
      {0, 1, {}},
      {0,
       8,
       {"96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"}},
      {5,
       8,
       {"bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"}},
      {2,
       3,
       {"fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"}},
      {1,
       5,
       {"6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"}},
  };
  for (const Case& c : cases) {
    auto proof = tree.InclusionProof(c.index, c.size);
    ASSERT_TRUE(proof.ok()) << proof.status();
    ASSERT_EQ(proof->size(), c.proof.size()) << c.index << "/" << c.size;
    for (size_t i = 0; i < c.proof.size(); ++i) {
      EXPECT_EQ(MerkleHashHex((*proof)[i]), c.proof[i]);
    }
    EXPECT_TRUE(VerifyInclusion(c.index, c.size, tree.leaf(c.index), *proof,
                                *tree.Root(c.size))
                    .ok());
  }
}

TEST(MerkleTest, ConsistencyProofsMatchReferenceVectors) {
  const MerkleTree tree(ReferenceLeaves());
  struct Case {
    uint64_t m, n;
    std::vector<const char*> proof;
  };
  const Case cases[] = {
      {1, 1, {}},
      {1,
       8,
       {"96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"}},
      {6,
       8,
       {"0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"}},
      {2,
       5,
       {"5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"}},
  };
  for (const Case& c : cases) {
    auto proof = tree.ConsistencyProof(c.m, c.n);
    ASSERT_TRUE(proof.ok()) << proof.status();
    ASSERT_EQ(proof->size(), c.proof.size()) << c.m << "->" << c.n;
    for (size_t i = 0; i < c.proof.size(); ++i) {
      EXPECT_EQ(MerkleHashHex((*proof)[i]), c.proof[i]);
    }
    EXPECT_TRUE(
        VerifyConsistency(c.m, c.n, *tree.Root(c.m), *tree.Root(c.n), *proof)
            .ok());
  }
}

TEST(MerkleTest, EveryInclusionProofVerifiesForSizesUpTo64AndNothingElse) {
  const std::vector<MerkleHash> leaves = SyntheticLeaves(64);
  const MerkleTree tree(leaves);
  for (uint64_t n = 1; n <= 64; ++n) {
    const MerkleHash root = *tree.Root(n);
    ASSERT_EQ(root, ReferenceRoot(leaves, 0, n)) << n;
    for (uint64_t i = 0; i < n; ++i) {
      const std::vector<MerkleHash> proof = *tree.InclusionProof(i, n);
      ASSERT_TRUE(VerifyInclusion(i, n, leaves[i], proof, root).ok())
          << i << "/" << n;
      EXPECT_FALSE(
          VerifyInclusion(i, n, leaves[(i + 1) % 64], proof, root).ok());
      if (n > 1) {
        EXPECT_FALSE(
            VerifyInclusion((i + 1) % n, n, leaves[i], proof, root).ok());
      }
      // (A proof may verify under another size with the same path shape:
      // the size is bound by the signed checkpoint, not the proof.)
      if (!proof.empty()) {
        std::vector<MerkleHash> bad = proof;
        bad.back()[0] ^= 1;
        EXPECT_FALSE(VerifyInclusion(i, n, leaves[i], bad, root).ok());
        bad = proof;
        bad.pop_back();
        EXPECT_FALSE(VerifyInclusion(i, n, leaves[i], bad, root).ok());
      }
    }
  }
}

TEST(MerkleTest, EveryConsistencyProofVerifiesForSizesUpTo64AndNothingElse) {
  const MerkleTree tree(SyntheticLeaves(64));
  for (uint64_t n = 1; n <= 64; ++n) {
    for (uint64_t m = 0; m <= n; ++m) {
      const std::vector<MerkleHash> proof = *tree.ConsistencyProof(m, n);
      const MerkleHash r1 = *tree.Root(m), r2 = *tree.Root(n);
      ASSERT_TRUE(VerifyConsistency(m, n, r1, r2, proof).ok())
          << m << "->" << n;
      if (m == 0) continue;
      MerkleHash other = r2;
      other[5] ^= 1;
      EXPECT_FALSE(VerifyConsistency(m, n, r1, other, proof).ok());
      if (m < n) {
        EXPECT_FALSE(VerifyConsistency(m, n, other, r2, proof).ok());
        std::vector<MerkleHash> bad = proof;
        bad[0][0] ^= 1;
        EXPECT_FALSE(VerifyConsistency(m, n, r1, r2, bad).ok());
        if (n < 64) {
          EXPECT_FALSE(
              VerifyConsistency(m, n + 1, r1, *tree.Root(n + 1), proof).ok());
        }
      }
    }
  }
}

TEST(MerkleTest, ProofsPastTheTreeAreOutOfRange) {
  const MerkleTree tree(SyntheticLeaves(5));
  EXPECT_EQ(tree.InclusionProof(5, 5).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(tree.InclusionProof(0, 6).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(tree.ConsistencyProof(3, 6).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(tree.ConsistencyProof(4, 3).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(tree.Root(6).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(MerkleTest, SplitIsTheLargestPowerOfTwoBelowN) {
  EXPECT_EQ(MerkleSplit(2), 1u);
  EXPECT_EQ(MerkleSplit(3), 2u);
  EXPECT_EQ(MerkleSplit(4), 2u);
  EXPECT_EQ(MerkleSplit(5), 4u);
  EXPECT_EQ(MerkleSplit(1000), 512u);
  EXPECT_EQ(MerkleSplit(uint64_t{1} << 40), uint64_t{1} << 39);
}

}  // namespace
}  // namespace kvcanary::storage
