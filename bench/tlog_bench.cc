// kvcanary-bench-tlog: the verifiable log's figures at --rows evidence rows
// (default 1,000,000): rows per second to read the leaves out of SQLite and
// to build the RFC 6962 tree, the time to sign a checkpoint, and the size
// and time of an inclusion and a consistency proof.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "bench/machine.h"
#include "storage/ed25519_key.h"
#include "storage/evidence_store.h"
#include "storage/evidence_tlog.h"
#include "storage/merkle.h"
#include "storage/signed_note.h"

ABSL_FLAG(int64_t, rows, 1000000, "evidence rows in the log");
ABSL_FLAG(std::string, dir, "/tmp", "directory for the evidence database");

namespace {

using namespace kvcanary::storage;
using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

bool Fill(EvidenceStore& store, int64_t rows) {
  std::vector<EvidenceRecord> batch;
  for (int64_t i = 0; i < rows; ++i) {
    EvidenceRecord r;
    r.kind = i % 50 == 0 ? "finding" : "probe";
    r.campaign = absl::StrCat("c", i / 10000);
    r.ts_us = 1700000000000000 + i;
    r.body = {{"canary_id", absl::StrCat("canary-", i)},
              {"page", i % 4096},
              {"tenant", absl::StrCat("t", i % 8)},
              {"ttft_us", 1000 + i % 777}};
    batch.push_back(std::move(r));
    if (batch.size() == 10000 || i + 1 == rows) {
      if (!store.Append(batch).ok()) return false;
      batch.clear();
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  kvcanary::bench::PrintMachine();
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const std::string db = absl::StrCat(absl::GetFlag(FLAGS_dir),
                                      "/kvcanary-bench-tlog-", getpid(), ".db");
  auto t = Clock::now();
  {
    auto store = EvidenceStore::Open(db);
    if (!store.ok() || !Fill(**store, rows)) {
      std::fprintf(stderr, "cannot fill %s\n", db.c_str());
      return 2;
    }
  }
  std::printf("filled %lld rows in %.1f s (setup, not a figure)\n",
              static_cast<long long>(rows), Seconds(t));
  auto store = EvidenceStore::OpenReadOnly(db);
  if (!store.ok()) return 2;

  t = Clock::now();
  std::vector<MerkleHash> leaves = *EvidenceLeafHashes(**store);
  const double read_s = Seconds(t);
  t = Clock::now();
  const MerkleTree tree(leaves);
  const double build_s = Seconds(t);
  t = Clock::now();
  const MerkleHash stack_root = MerkleRootOf(leaves);
  const double root_s = Seconds(t);
  std::printf("read rows + leaf hashes: %.2f s, %.0f rows/s\n", read_s,
              rows / read_s);
  std::printf("build tree (all levels): %.3f s, %.0f rows/s\n", build_s,
              rows / build_s);
  std::printf("root only (stack):       %.3f s, %.0f rows/s%s\n", root_s,
              rows / root_s, stack_root == tree.Root() ? "" : " MISMATCH");

  const Ed25519Key key = *Ed25519Key::Generate();
  const std::string ckpt_dir = db + ".ckpt";
  t = Clock::now();
  auto written = WriteCheckpoint(**store, key, "kvcanary/bench", {ckpt_dir});
  std::printf("checkpoint (chain verify + tree + sign + write): %.2f s%s\n",
              Seconds(t), written.ok() ? "" : " FAILED");

  const uint64_t n = tree.size();
  constexpr int kProofs = 1000;
  t = Clock::now();
  size_t inclusion_len = 0;
  for (int i = 0; i < kProofs; ++i) {
    inclusion_len = tree.InclusionProof((n / kProofs) * i, n)->size();
  }
  const double inc_us = Seconds(t) / kProofs * 1e6;
  const uint64_t index = n / 3;
  const auto proof = *tree.InclusionProof(index, n);
  t = Clock::now();
  for (int i = 0; i < kProofs; ++i) {
    (void)VerifyInclusion(index, n, tree.leaf(index), proof, tree.Root());
  }
  const double inc_verify_us = Seconds(t) / kProofs * 1e6;
  t = Clock::now();
  size_t cons_len = 0;
  for (int i = 1; i <= kProofs; ++i) {
    cons_len = tree.ConsistencyProof((n / kProofs) * i - 1, n)->size();
  }
  const double cons_us = Seconds(t) / kProofs * 1e6;
  std::printf(
      "inclusion proof at %llu rows: %zu hashes = %zu bytes, %.1f us to "
      "make, %.1f us to verify\n",
      static_cast<unsigned long long>(n), inclusion_len, inclusion_len * 32,
      inc_us, inc_verify_us);
  std::printf(
      "consistency proof to %llu rows: %zu hashes = %zu bytes, %.1f us to "
      "make\n",
      static_cast<unsigned long long>(n), cons_len, cons_len * 32, cons_us);
  t = Clock::now();
  auto end_to_end = ProveInclusion(**store, static_cast<int64_t>(index + 1));
  std::printf("prove --row from the database (read + tree + proof): %.2f s%s\n",
              Seconds(t), end_to_end.ok() ? "" : " FAILED");

  store->reset();
  std::filesystem::remove_all(ckpt_dir);
  for (const char* s : {"", "-wal", "-shm"}) std::filesystem::remove(db + s);
  return 0;
}
