#include "auditor/evidence/tlog_commands.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "nlohmann/json.hpp"
#include "storage/ed25519_key.h"
#include "storage/evidence_tlog.h"
#include "storage/merkle.h"
#include "storage/signed_note.h"

namespace kvcanary::auditor {
namespace {

using storage::MerkleHash;
using storage::MerkleHashHex;

int Error(const absl::Status& s) {
  std::fprintf(stderr, "kvcanary-auditor: %s\n",
               std::string(s.message()).c_str());
  return kTlogError;
}

int Required(const std::string& value, const char* flag) {
  if (!value.empty()) return kTlogOk;
  return Error(absl::InvalidArgumentError(absl::StrCat(flag, " is required")));
}

nlohmann::json Hexes(const std::vector<MerkleHash>& hashes) {
  nlohmann::json out = nlohmann::json::array();
  for (const MerkleHash& h : hashes) out.push_back(MerkleHashHex(h));
  return out;
}

}  // namespace

std::string DefaultOrigin() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') {
    return "kvcanary/localhost";
  }
  std::string name = host;
  for (char& c : name) {
    if (c == ' ' || c == '+') c = '-';  // not allowed in a note key name
  }
  return absl::StrCat("kvcanary/", name);
}

int Keygen(const KeygenOptions& o) {
  if (int rc = Required(o.out, "--out")) return rc;
  const std::string pub = o.out + ".pub";
  std::error_code ec;
  if (!o.overwrite && (std::filesystem::exists(o.out, ec) ||
                       std::filesystem::exists(pub, ec))) {
    return Error(absl::AlreadyExistsError(absl::StrCat(
        o.out, " or ", pub, " exists; refusing to replace a signing key")));
  }
  absl::StatusOr<storage::Ed25519Key> key = storage::Ed25519Key::Generate();
  if (!key.ok()) return Error(key.status());
  if (absl::Status s = WriteFileAtomically(o.out, key->PrivatePem(), 0600);
      !s.ok()) {
    return Error(s);
  }
  if (absl::Status s = WriteFileAtomically(pub, key->PublicPem(), 0644);
      !s.ok()) {
    return Error(s);
  }
  std::printf("private key %s\npublic key  %s\nkey id %08x under %s\n",
              o.out.c_str(), pub.c_str(),
              storage::NoteKeyId(DefaultOrigin(), *key),
              DefaultOrigin().c_str());
  return kTlogOk;
}

int Checkpoint(const CheckpointOptions& o) {
  if (int rc = Required(o.db, "--db")) return rc;
  if (int rc = Required(o.key, "--key")) return rc;
  if (o.dirs.empty()) return Required("", "--checkpoint-dir");
  absl::StatusOr<storage::Ed25519Key> key =
      storage::Ed25519Key::ReadPemFile(o.key);
  if (!key.ok()) return Error(key.status());
  if (!key->has_private()) {
    return Error(absl::InvalidArgumentError(absl::StrCat(
        o.key, ": a public key cannot sign; give the private key")));
  }
  auto store = storage::EvidenceStore::OpenReadOnly(o.db);
  if (!store.ok()) return Error(store.status());
  const std::string origin = o.origin.empty() ? DefaultOrigin() : o.origin;
  absl::StatusOr<storage::WrittenCheckpoint> written =
      storage::WriteCheckpoint(**store, *key, origin, o.dirs);
  if (!written.ok()) {
    if (written.status().code() == absl::StatusCode::kDataLoss) {
      std::printf("%s: NOT SIGNED: %s\n", o.db.c_str(),
                  std::string(written.status().message()).c_str());
      return kTlogFailed;
    }
    return Error(written.status());
  }
  std::printf("checkpoint %s: %llu rows, root %s\n", origin.c_str(),
              static_cast<unsigned long long>(written->checkpoint.tree_size),
              MerkleHashHex(written->checkpoint.root).c_str());
  for (const std::string& p : written->paths) std::printf("  %s\n", p.c_str());
  return kTlogOk;
}

int Prove(const ProveOptions& o) {
  if (int rc = Required(o.db, "--db")) return rc;
  auto store = storage::EvidenceStore::OpenReadOnly(o.db);
  if (!store.ok()) return Error(store.status());
  nlohmann::json out;
  if (o.row > 0) {
    auto p = storage::ProveInclusion(**store, o.row, o.tree_size);
    if (!p.ok()) return Error(p.status());
    if (absl::Status s = storage::VerifyInclusion(
            p->leaf_index, p->tree_size, p->leaf_hash, p->proof, p->root);
        !s.ok()) {
      return Error(s);  // our own proof must verify: a bug, not tampering
    }
    out = {{"type", "inclusion"},
           {"row", p->seq},
           {"leaf_index", p->leaf_index},
           {"tree_size", p->tree_size},
           {"leaf_hash", MerkleHashHex(p->leaf_hash)},
           {"root", MerkleHashHex(p->root)},
           {"proof", Hexes(p->proof)}};
  } else {
    auto p = storage::ProveConsistency(**store, o.from_size, o.to_size);
    if (!p.ok()) return Error(p.status());
    if (absl::Status s = storage::VerifyConsistency(
            p->old_size, p->new_size, p->old_root, p->new_root, p->proof);
        !s.ok()) {
      return Error(s);
    }
    out = {{"type", "consistency"},
           {"old_size", p->old_size},
           {"new_size", p->new_size},
           {"old_root", MerkleHashHex(p->old_root)},
           {"new_root", MerkleHashHex(p->new_root)},
           {"proof", Hexes(p->proof)}};
  }
  std::printf("%s\n", out.dump(2).c_str());
  return kTlogOk;
}

absl::StatusOr<std::vector<std::string>> UnfinishedCampaignLines(
    const std::string& db) {
  auto store = storage::EvidenceStore::OpenReadOnly(db);
  if (!store.ok()) return store.status();
  auto open = (*store)->FindUnfinishedCampaigns();
  if (!open.ok()) return open.status();
  std::vector<std::string> lines;
  for (const std::string& c : open->campaigns) {
    lines.push_back(absl::StrCat(
        "campaign ", c,
        open->writer_active
            ? ": no end recorded yet (a writer holds the database)"
            : ": interrupted (no end recorded, no writer holds the database)"));
  }
  return lines;
}

int VerifyWithCheckpoints(const VerifyCheckpointOptions& o) {
  if (int rc = Required(o.db, "--db")) return rc;
  if (int rc = Required(o.checkpoint, "--checkpoint")) return rc;
  if (int rc = Required(o.pubkey, "--pubkey")) return rc;
  auto key = storage::Ed25519Key::ReadPemFile(o.pubkey);
  if (!key.ok()) return Error(key.status());
  auto report = storage::VerifyAgainstCheckpoints(o.db, o.checkpoint, *key);
  if (!report.ok()) return Error(report.status());
  if (report->chain.ok) {
    std::printf("%s: hash chain intact, %lld rows\n", o.db.c_str(),
                static_cast<long long>(report->chain.rows_checked));
  } else {
    std::printf("%s: hash chain BROKEN at row %lld: %s\n", o.db.c_str(),
                static_cast<long long>(report->chain.first_bad_seq),
                report->chain.problem.c_str());
  }
  for (const storage::CheckpointVerdict& v : report->checkpoints) {
    if (v.ok) {
      std::printf("checkpoint %s (%llu rows): intact\n", v.path.c_str(),
                  static_cast<unsigned long long>(v.checkpoint.tree_size));
      continue;
    }
    std::string where;
    if (v.first_diverging_row > 0) {
      where = absl::StrCat(" [first diverging row ", v.first_diverging_row,
                           ", ", v.rows_missing, " rows missing]");
    }
    std::printf("checkpoint %s: TAMPERED (%s): %s%s\n", v.path.c_str(),
                v.what.c_str(), v.description.c_str(), where.c_str());
  }
  if (report->ok && report->rows_after_checkpoint > 0) {
    std::printf(
        "%lld rows after the newest checkpoint: covered by the hash "
        "chain only\n",
        static_cast<long long>(report->rows_after_checkpoint));
  }
  auto unfinished = UnfinishedCampaignLines(o.db);
  if (unfinished.ok()) {
    for (const std::string& line : *unfinished)
      std::printf("%s\n", line.c_str());
  }
  std::printf("%s\n", report->ok ? "verified" : "VERIFICATION FAILED");
  return report->ok ? kTlogOk : kTlogFailed;
}

}  // namespace kvcanary::auditor
