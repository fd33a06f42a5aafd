#include "auditor/evidence/bundle_format.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "auditor/result/finding.h"
#include "common/clock.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;

// The stored body as JSON; null when it is not (the row will not verify).
json Body(const storage::StoredRow& r) {
  json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? json(nullptr) : j;
}

json Field(const json& body, const char* name) {
  return body.is_object() && body.contains(name) ? body[name] : json(nullptr);
}

bool SafeFileName(const std::string& id) {
  if (id.empty() || id[0] == '.' || id.size() > 128) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  });
}

std::string FileName(const std::string& id) {
  if (SafeFileName(id)) return id;
  return absl::StrCat("campaign-", Sha256Hex(id).substr(0, 16));
}

absl::StatusOr<int64_t> Int(absl::string_view s, absl::string_view what) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || absl::StrCat(v) != s) {
    return absl::InvalidArgumentError(absl::StrCat("bad ", what, ": ", s));
  }
  return v;
}

}  // namespace

absl::StatusOr<int64_t> ParseRfc3339Us(const std::string& text) {
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &err)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not an RFC 3339 time (2026-12-03T10:15:00Z): ", err));
  }
  return absl::ToUnixMicros(t);
}

std::string BundleHeader::EncodeText() const {
  return absl::StrCat(
      kBundleFormat, "\norigin ", origin, "\nwindow ", since_us, " ", until_us,
      "\nexported ", exported_us, "\ncheckpoint ", tree_size, " ",
      storage::MerkleHashHex(root), "\nmanifest.json ", manifest_sha256, "\n");
}

absl::StatusOr<BundleHeader> BundleHeader::DecodeText(absl::string_view text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (lines.size() != 7 || !lines[6].empty() || lines[0] != kBundleFormat) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a ", kBundleFormat, " header"));
  }
  auto words = [&](int i, absl::string_view key,
                   size_t n) -> absl::StatusOr<std::vector<std::string>> {
    std::vector<std::string> w = absl::StrSplit(lines[i], ' ');
    if (w.size() != n + 1 || w[0] != key) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", i + 1, ": expected '", key, "'"));
    }
    return std::vector<std::string>(w.begin() + 1, w.end());
  };
  BundleHeader h;
  if (!absl::StartsWith(lines[1], "origin ") || lines[1].size() <= 7) {
    return absl::InvalidArgumentError("line 2: expected 'origin'");
  }
  h.origin = lines[1].substr(7);
  ASSIGN_OR_RETURN(auto window, words(2, "window", 2));
  ASSIGN_OR_RETURN(h.since_us, Int(window[0], "since"));
  ASSIGN_OR_RETURN(h.until_us, Int(window[1], "until"));
  ASSIGN_OR_RETURN(auto exported, words(3, "exported", 1));
  ASSIGN_OR_RETURN(h.exported_us, Int(exported[0], "exported"));
  ASSIGN_OR_RETURN(auto cp, words(4, "checkpoint", 2));
  ASSIGN_OR_RETURN(int64_t size, Int(cp[0], "tree size"));
  if (size < 0) return absl::InvalidArgumentError("negative tree size");
  h.tree_size = static_cast<uint64_t>(size);
  ASSIGN_OR_RETURN(h.root, storage::MerkleHashFromHex(cp[1]));
  ASSIGN_OR_RETURN(auto manifest, words(5, "manifest.json", 1));
  h.manifest_sha256 = manifest[0];
  if (h.manifest_sha256.size() != 64) {
    return absl::InvalidArgumentError("line 6: bad manifest hash");
  }
  return h;
}

BundleFile DescribeFile(const std::string& path, absl::string_view bytes) {
  return {path, Sha256Hex(bytes), bytes.size()};
}

std::string EncodeManifest(const BundleHeader& h,
                           std::vector<BundleFile> files) {
  std::sort(
      files.begin(), files.end(),
      [](const BundleFile& a, const BundleFile& b) { return a.path < b.path; });
  json list = json::array();
  for (const BundleFile& f : files) {
    list.push_back(
        {{"path", f.path}, {"sha256", f.sha256}, {"size_bytes", f.size_bytes}});
  }
  return JsonFileBytes({{"format", kBundleFormat},
                        {"origin", h.origin},
                        {"since", Rfc3339Utc(h.since_us)},
                        {"until", Rfc3339Utc(h.until_us)},
                        {"since_us", h.since_us},
                        {"until_us", h.until_us},
                        {"exported", Rfc3339Utc(h.exported_us)},
                        {"exported_us", h.exported_us},
                        {"tree_size", h.tree_size},
                        {"root", storage::MerkleHashHex(h.root)},
                        {"checkpoint", kCheckpointFile},
                        {"files", list}});
}

std::string JsonFileBytes(const json& j) {
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string EncodeRowLine(const storage::StoredRow& r) {
  json j = {{"seq", r.seq},
            {"kind", r.kind},
            {"campaign", r.campaign},
            {"ts_us", r.ts_us},
            {"body", r.body}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::StatusOr<storage::StoredRow> DecodeRowLine(absl::string_view line) {
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("not a JSON object");
  }
  storage::StoredRow r;
  try {
    r.seq = j.at("seq").get<int64_t>();
    r.kind = j.at("kind").get<std::string>();
    r.campaign = j.at("campaign").get<std::string>();
    r.ts_us = j.at("ts_us").get<int64_t>();
    r.body = j.at("body").get<std::string>();
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
  if (j.size() != 5) return absl::InvalidArgumentError("unexpected fields");
  return r;
}

std::string ProofLine::Encode() const {
  json hashes = json::array();
  for (const storage::MerkleHash& h : proof) {
    hashes.push_back(storage::MerkleHashHex(h));
  }
  json j = {{"seq", seq},
            {"leaf_index", leaf_index},
            {"tree_size", tree_size},
            {"proof", hashes}};
  return j.dump();
}

absl::StatusOr<ProofLine> ProofLine::Decode(absl::string_view line) {
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("not a JSON object");
  }
  ProofLine p;
  try {
    p.seq = j.at("seq").get<int64_t>();
    p.leaf_index = j.at("leaf_index").get<uint64_t>();
    p.tree_size = j.at("tree_size").get<uint64_t>();
    for (const json& h : j.at("proof")) {
      ASSIGN_OR_RETURN(storage::MerkleHash hash,
                       storage::MerkleHashFromHex(h.get<std::string>()));
      p.proof.push_back(hash);
    }
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return p;
}

std::string CampaignPath(const std::string& campaign) {
  return absl::StrCat("campaigns/", FileName(campaign), ".json");
}

std::string FactsPath(const std::string& campaign) {
  return absl::StrCat("facts/", FileName(campaign), ".json");
}

json CampaignDocument(const std::string& campaign,
                      const std::vector<storage::StoredRow>& rows) {
  json start = nullptr, end = nullptr;
  int64_t start_us = 0, end_us = 0;
  json incidents = json::array(), cited = json::array();
  std::map<std::string, int64_t> counts;
  for (const storage::StoredRow& r : rows) {
    cited.push_back(r.seq);
    ++counts[r.kind];
    if (r.kind == "campaign_start" && start.is_null()) {
      start = Body(r);
      start_us = r.ts_us;
    } else if (r.kind == "campaign_end") {
      end = Body(r);
      end_us = r.ts_us;
    } else if (r.kind == "incident") {
      incidents.push_back(Body(r));
    }
  }
  json verdict = Field(end, "verdict");
  if (verdict.is_null()) verdict = Field(end, "result");
  json command = Field(start, "command");
  if (command.is_null()) command = Field(end, "command");
  json doc = {
      {"format", "kvcanary-bundle-campaign-v1"},
      {"campaign", campaign},
      {"file", CampaignPath(campaign)},
      {"command", command},
      {"target", Field(start, "target")},
      {"tenants", Field(start, "tenants")},
      {"plan", start},
      {"started", start.is_null() ? json(nullptr) : json(Rfc3339Utc(start_us))},
      {"started_us", start_us},
      {"ended", end.is_null() ? json(nullptr) : json(Rfc3339Utc(end_us))},
      {"ended_us", end.is_null() ? json(nullptr) : json(end_us)},
      {"verdict", end.is_null() ? json("unfinished") : verdict},
      {"exit_code", Field(end, "exit_code")},
      {"reasons", end.is_null()
                      ? json::array({"no campaign_end row in the log when "
                                     "the bundle was exported"})
                      : Field(end, "reasons")},
      {"detectors", Field(end, "detectors")},
      {"end", end},
      {"incidents", incidents},
      {"counts", counts},
      {"cited_rows", cited}};
  return doc;
}

json FactsDocument(const std::string& campaign,
                   const std::vector<storage::StoredRow>& rows) {
  json table = nullptr, target = nullptr;
  std::map<std::string, std::vector<int64_t>> seqs;
  for (const storage::StoredRow& r : rows) {
    if (r.kind == "campaign_start") target = Field(Body(r), "target");
    if (!absl::StartsWith(r.kind, "facts_")) continue;
    seqs[r.kind].push_back(r.seq);
    if (r.kind == "facts_table") table = Body(r);
  }
  if (table.is_null()) return nullptr;
  return {{"format", "kvcanary-bundle-facts-v1"},
          {"campaign", campaign},
          {"target", target},
          {"table", table},
          {"rows", seqs}};
}

std::string FirstDifference(const json& want, const json& got) {
  const json patch = json::diff(want, got);
  if (patch.empty()) return "";
  return patch[0].value("path", "");
}

}  // namespace kvcanary::auditor
