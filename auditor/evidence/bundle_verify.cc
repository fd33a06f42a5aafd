#include "auditor/evidence/bundle_verify.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "auditor/evidence/tlog_commands.h"
#include "auditor/result/finding.h"
#include "common/clock.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "storage/merkle.h"
#include "storage/signed_note.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;
using storage::StoredRow;

// Where `got` departs from `want_bytes`: "byte N" if it is not JSON, the
// first JSON pointer that differs, or "formatting" when only the layout does.
std::string Locate(const std::string& want_bytes, const std::string& got) {
  json parsed;
  try {
    parsed = json::parse(got);
  } catch (const json::parse_error& e) {
    return absl::StrCat("byte ", e.byte, " (not valid JSON)");
  }
  const json want = json::parse(want_bytes, nullptr, false);
  const std::string at = FirstDifference(want, parsed);
  if (!at.empty()) return at;
  return want == parsed ? "(formatting)" : "/";
}

std::vector<std::string> Lines(const std::string& bytes) {
  std::vector<std::string> lines = absl::StrSplit(bytes, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

class Checker {
 public:
  Checker(std::string dir, const storage::Ed25519Key& key)
      : dir_(std::move(dir)), key_(key) {}

  absl::StatusOr<BundleVerifyReport> Run() {
    RETURN_IF_ERROR(ReadTree());
    r_.files = static_cast<int64_t>(files_.size());
    if (CheckSignature()) {
      CheckManifest();
      CheckCheckpoint();
      CheckRows();
      CheckCampaigns();
    }
    r_.ok = r_.problems.empty();
    return std::move(r_);
  }

 private:
  void Problem(const std::string& file, std::string where, std::string what) {
    r_.problems.push_back({file, std::move(where), std::move(what)});
  }
  const std::string* File(const std::string& path) {
    auto it = files_.find(path);
    if (it != files_.end()) return &it->second;
    Problem(path, "", "missing from the bundle");
    return nullptr;
  }

  // Reads every regular file under dir_, following nothing: a bundle is
  // exactly its manifest, so a symbolic link (to anything, even nowhere), a
  // FIFO, a socket or a device is a problem named by its own path in the
  // bundle and is never opened. Directories are kept for CheckDirectories.
  absl::Status ReadTree() {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir_, ec)) {
      return absl::NotFoundError(absl::StrCat(dir_, ": no such directory"));
    }
    std::filesystem::path root = std::filesystem::path(dir_).lexically_normal();
    if (!root.has_filename()) root = root.parent_path();  // "bundle/"
    // The iterator follows no directory link (directory_options::none).
    for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
         !ec && it != std::filesystem::recursive_directory_iterator();
         it.increment(ec)) {
      // Lexical, not std::filesystem::relative: that resolves links.
      const std::string rel =
          it->path().lexically_relative(root).generic_string();
      const std::filesystem::file_status st = it->symlink_status(ec);
      if (ec) break;
      if (std::filesystem::is_directory(st)) {
        dirs_.insert(rel);
      } else if (!std::filesystem::is_regular_file(st)) {
        Problem(rel, "", NotRegular(st));
      } else {
        ASSIGN_OR_RETURN(files_[rel], ReadNoFollow(it->path().string()));
      }
    }
    if (ec) return absl::InternalError(absl::StrCat(dir_, ": ", ec.message()));
    return absl::OkStatus();
  }

  static std::string NotRegular(const std::filesystem::file_status& st) {
    using std::filesystem::file_type;
    switch (st.type()) {
      case file_type::symlink:
        return "a symbolic link, not a file of the bundle (not followed)";
      case file_type::fifo:
        return "a FIFO, not a file of the bundle (not opened)";
      case file_type::socket:
        return "a socket, not a file of the bundle";
      case file_type::block:
      case file_type::character:
        return "a device, not a file of the bundle (not opened)";
      default:
        return "not a regular file";
    }
  }

  // The file at `path`, refusing it if it turned into anything but a
  // regular file since it was listed (O_NOFOLLOW; O_NONBLOCK so that a
  // FIFO swapped in cannot stall the check).
  static absl::StatusOr<std::string> ReadNoFollow(const std::string& path) {
    const int fd =
        open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      if (fd >= 0) close(fd);
      return absl::FailedPreconditionError(absl::StrCat(
          path, ": changed while the bundle was read (not a regular file)"));
    }
    std::string bytes;
    char buf[1 << 16];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) bytes.append(buf, n);
    close(fd);
    if (n < 0) {
      return absl::InternalError(
          absl::StrCat(path, ": read failed: ", std::strerror(errno)));
    }
    return bytes;
  }

  // Every directory holds a file the manifest lists: an empty one, or one
  // of only unlisted files, is added matter (it could hold a fake report
  // tomorrow, or point a reader at one).
  void CheckDirectories(const std::set<std::string>& listed) {
    std::set<std::string> needed;
    for (const std::string& path : listed) {
      for (size_t slash = path.find('/'); slash != std::string::npos;
           slash = path.find('/', slash + 1)) {
        needed.insert(path.substr(0, slash));
      }
    }
    for (const std::string& d : dirs_) {
      if (!needed.count(d)) {
        Problem(d + "/", "", "a directory the manifest lists no file in");
      }
    }
  }

  // A signed note must be exactly as encoded: no second spelling of the
  // same signature (base64's spare bits) passes for the signed bytes.
  bool Canonical(const std::string& path, const std::string& bytes) {
    auto note = storage::Note::Decode(bytes);
    if (note.ok() && note->Encode() == bytes) return true;
    Problem(path, "",
            note.ok() ? "not a canonically encoded signed note"
                      : std::string(note.status().message()));
    return false;
  }

  bool CheckSignature() {
    const std::string* sig = File(kManifestSigFile);
    if (sig == nullptr || !Canonical(kManifestSigFile, *sig)) return false;
    auto text = storage::OpenNote(*sig, key_);
    if (!text.ok()) {
      Problem(kManifestSigFile, "",
              absl::StrCat("does not verify with the given public key: ",
                           text.status().message()));
      return false;
    }
    auto h = BundleHeader::DecodeText(*text);
    if (!h.ok()) {
      Problem(kManifestSigFile, "", std::string(h.status().message()));
      return false;
    }
    if (!storage::OpenNote(*sig, key_, h->origin).ok()) {
      Problem(kManifestSigFile, "", "not signed under the bundle's origin");
      return false;
    }
    r_.header = *h;
    r_.signature_ok = true;
    return true;
  }

  void CheckManifest() {
    const std::string* bytes = File(kManifestFile);
    if (bytes == nullptr) return;
    if (Sha256Hex(*bytes) != r_.header.manifest_sha256) {
      std::vector<BundleFile> actual;
      for (const auto& [path, b] : files_) {
        if (path != kManifestFile && path != kManifestSigFile) {
          actual.push_back(DescribeFile(path, b));
        }
      }
      Problem(kManifestFile, Locate(EncodeManifest(r_.header, actual), *bytes),
              "SHA-256 differs from the one manifest.sig signs");
      return;  // the list cannot be trusted; the files are checked below
    }
    std::set<std::string> listed = {kManifestFile, kManifestSigFile};
    const json m = json::parse(*bytes, nullptr, false);
    for (const json& f : m.value("files", json::array())) {
      const std::string path = f.value("path", "");
      listed.insert(path);
      auto it = files_.find(path);
      if (it == files_.end()) {
        Problem(path, "", "listed in the manifest but missing");
      } else if (Sha256Hex(it->second) != f.value("sha256", "") ||
                 it->second.size() != f.value("size_bytes", uint64_t{0})) {
        bad_.insert(path);
        Problem(path, "", "SHA-256 differs from the manifest's");
      }
    }
    for (const auto& [path, b] : files_) {
      if (!listed.count(path)) Problem(path, "", "not listed in the manifest");
    }
    CheckDirectories(listed);
  }

  void CheckCheckpoint() {
    const std::string* bytes = File(kCheckpointFile);
    if (bytes == nullptr || !Canonical(kCheckpointFile, *bytes)) return;
    auto cp = storage::OpenCheckpoint(*bytes, key_);
    if (!cp.ok()) {
      Problem(kCheckpointFile, "",
              absl::StrCat("signature does not verify with the given public "
                           "key: ",
                           cp.status().message()));
      return;
    }
    const BundleHeader& h = r_.header;
    if (cp->origin != h.origin) {
      Problem(kCheckpointFile, "line 1 (origin)", "not the bundle's origin");
    }
    if (cp->tree_size != h.tree_size || cp->root != h.root) {
      Problem(kCheckpointFile, "line 2-3 (tree)",
              "not the tree manifest.sig names");
    }
  }

  void CheckRows() {
    const std::string* rows = File(kRowsFile);
    const std::string* proofs = File(kProofsFile);
    if (rows == nullptr || proofs == nullptr) return;
    std::map<int64_t, std::pair<int, ProofLine>> proof_of;  // seq -> line
    const std::vector<std::string> plines = Lines(*proofs);
    for (size_t i = 0; i < plines.size(); ++i) {
      const std::string at = absl::StrCat("line ", i + 1);
      auto p = ProofLine::Decode(plines[i]);
      if (!p.ok()) {
        Problem(kProofsFile, at, std::string(p.status().message()));
      } else if (!proof_of.emplace(p->seq, std::make_pair(i + 1, *p)).second) {
        Problem(kProofsFile, at, absl::StrCat("second proof of row ", p->seq));
      }
    }
    const std::vector<std::string> rlines = Lines(*rows);
    for (size_t i = 0; i < rlines.size(); ++i) {
      auto row = DecodeRowLine(rlines[i]);
      if (!row.ok()) {
        Problem(kRowsFile, absl::StrCat("line ", i + 1),
                std::string(row.status().message()));
        continue;
      }
      const std::string at =
          absl::StrCat("line ", i + 1, " (seq ", row->seq, ")");
      auto it = proof_of.find(row->seq);
      if (it == proof_of.end() || seqs_.count(row->seq)) {
        Problem(
            kRowsFile, at,
            seqs_.count(row->seq) ? "row cited twice" : "no inclusion proof");
        continue;
      }
      const auto [pline, p] = it->second;  // a copy: erased next
      proof_of.erase(it);
      const std::string pat =
          absl::StrCat("line ", pline, " (seq ", p.seq, ")");
      if (p.leaf_index != static_cast<uint64_t>(row->seq - 1)) {
        Problem(kProofsFile, pat + " /leaf_index", "not leaf seq-1");
        continue;
      }
      if (p.tree_size != r_.header.tree_size) {
        Problem(kProofsFile, pat + " /tree_size", "not the checkpoint's size");
        continue;
      }
      const absl::Status s = storage::VerifyInclusion(
          p.leaf_index, p.tree_size, storage::MerkleLeafHash(row->LeafData()),
          p.proof, r_.header.root);
      if (!s.ok()) {
        const bool proof_bad =
            bad_.count(kProofsFile) && !bad_.count(kRowsFile);
        Problem(proof_bad ? kProofsFile : kRowsFile,
                proof_bad ? pat + " /proof" : at,
                absl::StrCat(
                    proof_bad ? "proof" : "row",
                    " does not verify against the signed root: ", s.message()));
        continue;
      }
      seqs_.insert(row->seq);
      by_campaign_[row->campaign].push_back(*row);
      ++r_.rows;
    }
    for (const auto& [seq, lp] : proof_of) {
      Problem(kProofsFile, absl::StrCat("line ", lp.first),
              absl::StrCat("proves row ", seq, ", which rows.jsonl lacks"));
    }
  }

  // A derived document: present, and byte for byte what the rows give.
  void CheckDerived(const std::string& path, const json& want) {
    expected_docs_.insert(path);
    const std::string* got = File(path);
    if (got == nullptr) return;
    const std::string want_bytes = JsonFileBytes(want);
    if (*got != want_bytes) {
      Problem(path, Locate(want_bytes, *got),
              "differs from what its rows in rows/rows.jsonl record");
    }
  }

  void CheckCampaigns() {
    for (auto& [campaign, rows] : by_campaign_) {
      std::sort(
          rows.begin(), rows.end(),
          [](const StoredRow& a, const StoredRow& b) { return a.seq < b.seq; });
      const json doc = CampaignDocument(campaign, rows);
      const std::string path = CampaignPath(campaign);
      if (doc["plan"].is_null()) {
        Problem(kRowsFile, "",
                absl::StrCat("rows of campaign ", campaign,
                             " without its campaign_start row"));
        continue;
      }
      ++r_.campaigns;
      CheckDerived(path, doc);
      CheckConsistency(path, doc);
      const json facts = FactsDocument(campaign, rows);
      if (!facts.is_null()) CheckDerived(FactsPath(campaign), facts);
    }
    for (const auto& [path, bytes] : files_) {
      if ((absl::StartsWith(path, "campaigns/") ||
           absl::StartsWith(path, "facts/")) &&
          !expected_docs_.count(path)) {
        Problem(path, "", "no such campaign in rows/rows.jsonl");
      }
    }
  }

  // What the rows say must agree with itself: the window, and the counts
  // campaign_end recorded against the rows the bundle carries.
  void CheckConsistency(const std::string& path, const json& doc) {
    const int64_t start_us = doc.value("started_us", int64_t{0});
    if (start_us < r_.header.since_us || start_us > r_.header.until_us) {
      Problem(path, "/started_us", "outside the bundle's window");
    }
    const json& end = doc["end"];
    if (!end.is_object() || !end.contains("incidents")) return;
    const int64_t incident_rows = doc["counts"].value("incident", int64_t{0});
    if (end["incidents"] != json(incident_rows)) {
      Problem(path, "/end/incidents",
              absl::StrCat("campaign_end counts ", end["incidents"].dump(),
                           " incidents; the bundle holds ", incident_rows,
                           " incident rows"));
    }
  }

  const std::string dir_;
  const storage::Ed25519Key& key_;
  std::map<std::string, std::string> files_;  // relative path -> bytes
  std::set<std::string> dirs_;                // relative paths, no '/' at end
  std::set<std::string> bad_;  // files whose SHA-256 the manifest refutes
  std::set<int64_t> seqs_;     // rows proven
  std::map<std::string, std::vector<StoredRow>> by_campaign_;
  std::set<std::string> expected_docs_;
  BundleVerifyReport r_;
};

}  // namespace

std::string BundleProblem::Line() const {
  return where.empty() ? absl::StrCat(file, ": ", what)
                       : absl::StrCat(file, " at ", where, ": ", what);
}

absl::StatusOr<BundleVerifyReport> CheckBundle(const std::string& dir,
                                               const storage::Ed25519Key& key) {
  return Checker(dir, key).Run();
}

int VerifyBundle(const std::string& dir, const std::string& pubkey_path) {
  auto error = [](const absl::Status& s) {
    std::fprintf(stderr, "kvcanary-auditor: %s\n",
                 std::string(s.message()).c_str());
    return kTlogError;
  };
  if (dir.empty() || pubkey_path.empty()) {
    return error(absl::InvalidArgumentError(
        "verify-bundle DIR --pubkey P: both are required"));
  }
  auto key = storage::Ed25519Key::ReadPemFile(pubkey_path);
  if (!key.ok()) return error(key.status());
  auto r = CheckBundle(dir, *key);
  if (!r.ok()) return error(r.status());
  if (r->signature_ok) {
    const BundleHeader& h = r->header;
    std::printf("bundle %s: %s, %s .. %s, checkpoint %llu rows, root %s\n",
                dir.c_str(), h.origin.c_str(), Rfc3339Utc(h.since_us).c_str(),
                Rfc3339Utc(h.until_us).c_str(),
                static_cast<unsigned long long>(h.tree_size),
                storage::MerkleHashHex(h.root).c_str());
  }
  std::printf(
      "%lld campaigns, %lld rows proven against the signed root, "
      "%lld files\n",
      static_cast<long long>(r->campaigns), static_cast<long long>(r->rows),
      static_cast<long long>(r->files));
  constexpr size_t kMaxLines = 20;
  for (size_t i = 0; i < r->problems.size() && i < kMaxLines; ++i) {
    std::printf("  %s\n", r->problems[i].Line().c_str());
  }
  if (r->problems.size() > kMaxLines) {
    std::printf("  ... and %zu more\n", r->problems.size() - kMaxLines);
  }
  std::printf("%s\n", r->ok ? "verified" : "VERIFICATION FAILED");
  return r->ok ? kTlogOk : kTlogFailed;
}

}  // namespace kvcanary::auditor
