#include "auditor/evidence/bundle.h"

#include <cstdio>
#include <filesystem>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "auditor/evidence/tlog_commands.h"
#include "auditor/result/finding.h"
#include "common/clock.h"
#include "common/file.h"
#include "common/status_macros.h"
#include "storage/evidence_tlog.h"
#include "storage/merkle.h"
#include "storage/signed_note.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;
using storage::MerkleHash;
using storage::StoredRow;

// The rows of the window's campaigns and the leaves of the whole log.
struct LogSnapshot {
  std::vector<MerkleHash> leaves;      // every row, seq order
  std::vector<std::string> campaigns;  // in the window, in start order
  std::map<std::string, std::vector<StoredRow>> rows;  // of those campaigns
};

// Two passes over the log: the leaves and the campaigns started in the
// window, then those campaigns' rows among the first leaves.size() rows
// (rows appended in between are past the tree and left out).
absl::StatusOr<LogSnapshot> ReadSnapshot(const storage::EvidenceStore& store,
                                         int64_t since_us, int64_t until_us) {
  LogSnapshot s;
  std::set<std::string> in_window;
  RETURN_IF_ERROR(store.ForEachStoredRow([&](const StoredRow& r) {
    if (r.seq != static_cast<int64_t>(s.leaves.size()) + 1) {
      return absl::DataLossError(absl::StrCat("row ", r.seq, " follows row ",
                                              s.leaves.size(), ": run verify"));
    }
    s.leaves.push_back(storage::MerkleLeafHash(r.LeafData()));
    if (r.kind == "campaign_start" && r.ts_us >= since_us &&
        r.ts_us <= until_us && in_window.insert(r.campaign).second) {
      s.campaigns.push_back(r.campaign);
    }
    return absl::OkStatus();
  }));
  const int64_t size = static_cast<int64_t>(s.leaves.size());
  RETURN_IF_ERROR(store.ForEachStoredRow([&](const StoredRow& r) {
    if (r.seq > size || !in_window.count(r.campaign)) return absl::OkStatus();
    if (storage::MerkleLeafHash(r.LeafData()) != s.leaves[r.seq - 1]) {
      return absl::DataLossError(
          absl::StrCat("row ", r.seq, " changed while exporting"));
    }
    s.rows[r.campaign].push_back(r);
    return absl::OkStatus();
  }));
  return s;
}

bool ReservedPath(const std::string& p) {
  return p == kManifestFile || p == kManifestSigFile || p == kCheckpointFile ||
         absl::StartsWith(p, "rows/") || absl::StartsWith(p, "proofs/") ||
         absl::StartsWith(p, "campaigns/") || absl::StartsWith(p, "facts/");
}

absl::Status CheckExtraPath(const std::string& p) {
  bool ok = !p.empty() && p[0] != '/' && p.find('\\') == std::string::npos;
  for (absl::string_view part : absl::StrSplit(p, '/')) {
    if (part.empty() || part == "." || part == "..") ok = false;
  }
  if (!ok || ReservedPath(p)) {
    return absl::InvalidArgumentError(
        absl::StrCat("extra bundle file '", p,
                     "': not a relative path outside the reserved names"));
  }
  return absl::OkStatus();
}

absl::Status PrepareOutDir(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_empty(dir, ec)) {
    return absl::AlreadyExistsError(
        absl::StrCat(dir, ": exists and is not empty; give a new directory"));
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status WriteFiles(const std::string& dir,
                        const std::map<std::string, std::string>& files) {
  for (const auto& [path, bytes] : files) {
    const std::filesystem::path full = std::filesystem::path(dir) / path;
    std::error_code ec;
    std::filesystem::create_directories(full.parent_path(), ec);
    if (ec)
      return absl::InternalError(
          absl::StrCat(full.string(), ": ", ec.message()));
    RETURN_IF_ERROR(WriteFileAtomically(full.string(), bytes, 0644));
  }
  return absl::OkStatus();
}

// The evidence files: campaigns, facts, rows and proofs.
absl::StatusOr<int64_t> EvidenceFiles(const LogSnapshot& s,
                                      const storage::MerkleTree& tree,
                                      BundleEvidence* ev,
                                      std::map<std::string, std::string>* out) {
  std::string rows_jsonl, proofs_jsonl;
  int64_t cited = 0;
  for (const std::string& c : s.campaigns) {
    const std::vector<StoredRow>& rows = s.rows.at(c);
    ev->campaigns.push_back(CampaignDocument(c, rows));
    ev->campaign_paths.push_back(CampaignPath(c));
    (*out)[CampaignPath(c)] = JsonFileBytes(ev->campaigns.back());
    json facts = FactsDocument(c, rows);
    if (!facts.is_null()) {
      ev->facts.push_back(facts);
      ev->facts_paths.push_back(FactsPath(c));
      (*out)[FactsPath(c)] = JsonFileBytes(facts);
    }
    for (const StoredRow& r : rows) {
      ProofLine p{r.seq, static_cast<uint64_t>(r.seq - 1), tree.size(), {}};
      ASSIGN_OR_RETURN(p.proof, tree.InclusionProof(p.leaf_index, p.tree_size));
      absl::StrAppend(&rows_jsonl, EncodeRowLine(r), "\n");
      absl::StrAppend(&proofs_jsonl, p.Encode(), "\n");
      ++cited;
    }
  }
  (*out)[kRowsFile] = std::move(rows_jsonl);
  (*out)[kProofsFile] = std::move(proofs_jsonl);
  return cited;
}

}  // namespace

absl::StatusOr<ExportedBundle> WriteBundle(const ExportOptions& o,
                                           const storage::Ed25519Key& key) {
  const int64_t now_us = NowUs();
  ExportedBundle b;
  BundleHeader& h = b.header;
  h.origin = o.origin.empty() ? DefaultOrigin() : o.origin;
  h.since_us = o.since_us;
  h.until_us = o.until_us == 0 ? now_us : o.until_us;
  h.exported_us = now_us;
  if (h.until_us < h.since_us) {
    return absl::InvalidArgumentError("--until is before --since");
  }
  if (!storage::IsNoteKeyName(h.origin)) {
    return absl::InvalidArgumentError(
        absl::StrCat("origin '", h.origin, "' cannot name a note key"));
  }
  std::map<std::string, std::string> files = o.extra_files;
  ASSIGN_OR_RETURN(storage::VerifyReport chain,
                   storage::EvidenceStore::Verify(o.db));
  if (!chain.ok) {
    return absl::DataLossError(absl::StrCat(
        "hash chain broken at row ", chain.first_bad_seq, ": ", chain.problem));
  }
  ASSIGN_OR_RETURN(auto store, storage::EvidenceStore::OpenReadOnly(o.db));
  ASSIGN_OR_RETURN(LogSnapshot snap,
                   ReadSnapshot(*store, h.since_us, h.until_us));
  const storage::MerkleTree tree(std::move(snap.leaves));
  h.tree_size = tree.size();
  h.root = tree.Root();
  b.evidence.since_us = h.since_us;
  b.evidence.until_us = h.until_us;
  b.evidence.exported_us = h.exported_us;
  b.evidence.origin = h.origin;
  b.evidence.tree_size = h.tree_size;
  b.evidence.root = h.root;
  std::map<std::string, std::string> evidence;
  ASSIGN_OR_RETURN(b.rows, EvidenceFiles(snap, tree, &b.evidence, &evidence));
  if (o.make_extra_files) {
    ASSIGN_OR_RETURN(auto more, o.make_extra_files(b.evidence));
    files.merge(more);
  }
  for (const auto& [path, bytes] : files) RETURN_IF_ERROR(CheckExtraPath(path));
  files.merge(evidence);
  const storage::Checkpoint cp{h.origin, h.tree_size, h.root, {}};
  ASSIGN_OR_RETURN(files[kCheckpointFile], storage::SignCheckpoint(cp, key));
  for (const auto& [path, bytes] : files) {
    b.files.push_back(DescribeFile(path, bytes));
  }
  const std::string manifest = EncodeManifest(h, b.files);
  h.manifest_sha256 = DescribeFile(kManifestFile, manifest).sha256;
  ASSIGN_OR_RETURN(std::string sig,
                   storage::SignNote(h.EncodeText(), h.origin, key));
  files[kManifestFile] = manifest;
  files[kManifestSigFile] = std::move(sig);
  RETURN_IF_ERROR(PrepareOutDir(o.out_dir));
  RETURN_IF_ERROR(WriteFiles(o.out_dir, files));
  return b;
}

int ExportBundle(const ExportOptions& o) {
  auto error = [](const absl::Status& s) {
    std::fprintf(stderr, "kvcanary-auditor: %s\n",
                 std::string(s.message()).c_str());
    return kTlogError;
  };
  if (o.db.empty() || o.key.empty() || o.out_dir.empty()) {
    return error(
        absl::InvalidArgumentError("--db, --key and --out are required"));
  }
  absl::StatusOr<storage::Ed25519Key> key =
      storage::Ed25519Key::ReadPemFile(o.key);
  if (!key.ok()) return error(key.status());
  if (!key->has_private()) {
    return error(absl::InvalidArgumentError(absl::StrCat(
        o.key, ": a public key cannot sign; give the private key")));
  }
  absl::StatusOr<ExportedBundle> b = WriteBundle(o, *key);
  if (!b.ok()) {
    if (b.status().code() == absl::StatusCode::kDataLoss) {
      std::printf("%s: NOT EXPORTED: %s (run verify)\n", o.db.c_str(),
                  std::string(b.status().message()).c_str());
      return kTlogFailed;
    }
    return error(b.status());
  }
  std::printf(
      "bundle %s: %zu campaigns (%s .. %s), %lld rows cited, %zu "
      "files\ncheckpoint %s: %llu rows, root %s\n",
      o.out_dir.c_str(), b->evidence.campaigns.size(),
      Rfc3339Utc(b->header.since_us).c_str(),
      Rfc3339Utc(b->header.until_us).c_str(), static_cast<long long>(b->rows),
      b->files.size() + 2, b->header.origin.c_str(),
      static_cast<unsigned long long>(b->header.tree_size),
      storage::MerkleHashHex(b->header.root).c_str());
  for (const json& c : b->evidence.campaigns) {
    std::printf(
        "  %s  %s  %s\n", c.value("campaign", "").c_str(),
        c["command"].is_string() ? c["command"].get<std::string>().c_str()
                                 : "-",
        c["verdict"].is_string() ? c["verdict"].get<std::string>().c_str()
                                 : "?");
  }
  return kTlogOk;
}

}  // namespace kvcanary::auditor
