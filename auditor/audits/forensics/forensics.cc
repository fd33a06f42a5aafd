// `forensics`: read a request log once (its SHA-256 and size as it goes),
// judge every request it recorded against the signatures of
// auditor/audits/forensics/rules.h, and state what it found per tenant and time
// window as floors, with the method beside each number. docs/forensics.md.
#include "auditor/audits/forensics/forensics.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "auditor/audits/forensics/log.h"
#include "auditor/audits/forensics/report.h"
#include "auditor/audits/forensics/rules.h"
#include "auditor/campaign/command_result.h"
#include "auditor/evidence/log.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "storage/evidence_store.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

// Lines longer than this are not parsed: skipped to the next newline and
// counted unreadable (a free-text log's dump, a writer that lost its
// newlines), so one line never holds more than this in memory.
constexpr size_t kMaxLineBytes = size_t{1} << 20;

using OnLineFn =
    std::function<void(absl::string_view line, int64_t line_no, bool too_long)>;

// Reads `path` once in chunks: every line (without its newline; a last
// line without one too) to `on_line` with its 1-based number — a line over
// kMaxLineBytes as too_long, without its text — and the file's SHA-256 and
// size.
absl::StatusOr<LogFile> ReadLog(const std::string& path,
                                const OnLineFn& on_line) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read --log ", path));
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(),
                                                              EVP_MD_CTX_free);
  CHECK(ctx != nullptr && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr));
  LogFile stats;
  stats.path = path;
  std::string pending, chunk(1 << 20, '\0');
  bool skipping = false;  // inside a line over kMaxLineBytes
  int64_t line_no = 0;
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const size_t n = static_cast<size_t>(in.gcount());
    if (n == 0) break;
    EVP_DigestUpdate(ctx.get(), chunk.data(), n);
    stats.size_bytes += static_cast<int64_t>(n);
    pending.append(chunk.data(), n);
    size_t start = 0;
    for (size_t nl = pending.find('\n'); nl != std::string::npos;
         nl = pending.find('\n', start)) {
      const bool too_long = skipping || nl - start > kMaxLineBytes;
      on_line(too_long ? absl::string_view()
                       : absl::string_view(pending).substr(start, nl - start),
              ++line_no, too_long);
      skipping = false;
      start = nl + 1;
    }
    pending.erase(0, start);
    if (pending.size() > kMaxLineBytes) {
      skipping = true;
      pending.clear();
    }
  }
  if (in.bad()) {
    return absl::UnavailableError(absl::StrCat("error reading --log ", path));
  }
  if (skipping || !pending.empty()) {
    on_line(skipping ? absl::string_view() : absl::string_view(pending),
            ++line_no, skipping);
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &md_len);
  stats.sha256 = absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(md), md_len));
  return stats;
}

// `path` and the rotated files beside it (`path`.N, N digits, as the
// router's access log rotates: engine/access_log.h), oldest first: the
// highest N first, `path` itself last.
std::vector<std::string> LogFiles(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path base(path);
  const std::string prefix = base.filename().string() + ".";
  const fs::path dir =
      base.has_parent_path() ? base.parent_path() : fs::path(".");
  std::vector<std::pair<uint64_t, std::string>> rotated;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() ||
        name.compare(0, prefix.size(), prefix) != 0) {
      continue;
    }
    uint64_t n = 0;
    const std::string suffix = name.substr(prefix.size());
    if (!absl::c_all_of(suffix,
                        [](char c) { return absl::ascii_isdigit(c); }) ||
        !absl::SimpleAtoi(suffix, &n) || !it->is_regular_file(ec)) {
      continue;
    }
    rotated.emplace_back(n, path + "." + suffix);  // as --log names it
  }
  std::sort(rotated.rbegin(), rotated.rend());
  std::vector<std::string> out;
  for (auto& [n, p] : rotated) out.push_back(std::move(p));
  out.push_back(path);
  return out;
}

std::string WithoutTrailingSlash(absl::string_view url) {
  absl::ConsumeSuffix(&url, "/");
  return std::string(url);
}

// The latest `calibration` row in `store` of a campaign whose
// campaign_start names `target`; nullopt if none.
absl::StatusOr<std::optional<storage::EvidenceRow>> LatestCalibration(
    storage::EvidenceStore& store, const std::string& target) {
  storage::EvidenceFilter filter;
  filter.kind = "campaign_start";
  ASSIGN_OR_RETURN(auto starts, store.Query(filter));
  std::set<std::string> campaigns;  // of `target`
  for (const storage::EvidenceRow& s : starts) {
    const json* t = FindPath(s.record.body, "target");
    if (t != nullptr && t->is_string() &&
        WithoutTrailingSlash(t->get<std::string>()) ==
            WithoutTrailingSlash(target)) {
      campaigns.insert(s.record.campaign);
    }
  }
  filter.kind = "calibration";
  ASSIGN_OR_RETURN(auto rows, store.Query(filter));
  // Only calibrations that time first tokens (probe's; accept's does not).
  for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
    if (campaigns.count(it->record.campaign) > 0 &&
        FindPath(it->record.body, "latency") != nullptr) {
      return *it;
    }
  }
  return std::nullopt;
}

// The first-token floor: the flag, else 0.3 x the per-token prefill cost
// of the latest `calibration` row in the evidence store against
// --calibration-target (its base_ms is a client-side cost a server's log
// does not see: left out, so the floor is lower and flags fewer requests),
// else none, with why.
absl::StatusOr<TtftFloor> FindFloor(const ForensicsOptions& o) {
  TtftFloor floor;
  if (o.ttft_floor_us_per_token > 0) {
    floor.us_per_token = o.ttft_floor_us_per_token;
    floor.from_flag = true;
    floor.source = "--ttft-floor-us-per-token";
    return floor;
  }
  if (o.calibration_target.empty()) {
    floor.source =
        "pass --ttft-floor-us-per-token X, or --calibration-target "
        "URL (the server the log is from) to use the latest calibration "
        "against it in --db";
    return floor;
  }
  ASSIGN_OR_RETURN(auto store, storage::EvidenceStore::Open(o.db_path));
  ASSIGN_OR_RETURN(const auto found,
                   LatestCalibration(*store, o.calibration_target));
  if (!found.has_value()) {
    floor.source = absl::StrCat("no calibration against ", o.calibration_target,
                                " in --db");
    return floor;
  }
  const storage::EvidenceRow& row = *found;
  const json* latency = FindPath(row.record.body, "latency");
  auto num = [latency](const char* key) {
    const json* v = latency ? FindPath(*latency, key) : nullptr;
    return v != nullptr && v->is_number() ? v->get<double>() : 0.0;
  };
  const json* calibrated = latency ? FindPath(*latency, "calibrated") : nullptr;
  const bool fitted = calibrated != nullptr && calibrated->is_boolean() &&
                      calibrated->get<bool>();
  const double per_token_ms = num("per_token_ms");
  // The API it was measured over; records before it was stored: completions.
  const json* api_field = FindPath(row.record.body, "api");
  const std::string api = api_field != nullptr && api_field->is_string()
                              ? api_field->get<std::string>()
                              : "completions";
  floor.evidence = {{"campaign", row.record.campaign},
                    {"api", api},
                    {"seq", row.seq},
                    {"ts", Rfc3339Utc(row.record.ts_us)},
                    {"target", o.calibration_target},
                    {"calibrated", fitted},
                    {"per_token_ms", per_token_ms},
                    {"base_ms", num("base_ms")},
                    {"r2", num("r2")}};
  const std::string which = absl::StrCat(
      "the latest latency calibration against ", o.calibration_target,
      " in --db (campaign ", row.record.campaign, " at ",
      Rfc3339Utc(row.record.ts_us), ", measured over ",
      api == "chat" ? "chat" : "text", " completions)");
  if (!fitted || per_token_ms <= 0) {
    const json* why = latency ? FindPath(*latency, "failure") : nullptr;
    floor.source = absl::StrCat(
        which, " has no latency fit",
        why != nullptr && why->is_string() && !why->get<std::string>().empty()
            ? ": " + why->get<std::string>()
            : "");
    return floor;
  }
  floor.us_per_token = 0.3 * per_token_ms * 1000;
  floor.source = absl::StrFormat(
      "0.3 x the per-token prefill cost %.4f ms (R2 %.2f) of %s", per_token_ms,
      num("r2"), which);
  return floor;
}

class Forensics {
 public:
  Forensics(const ForensicsOptions& o, AuditorMetrics* metrics)
      : o_(o), metrics_(metrics), report_(o) {}
  CampaignResult Run();

 private:
  absl::Status Steps();
  absl::Status ReadAll();
  void OnLine(absl::string_view line, int64_t line_no, bool too_long);
  absl::Status RecordStart();
  void Finish(const absl::Status& run);

  const ForensicsOptions& o_;
  AuditorMetrics* metrics_;
  std::unique_ptr<EvidenceLog> log_;
  LogFormat format_ = LogFormat::Kvcanary();
  RuleSet rules_;
  ForensicsReport report_;
  CampaignResult r_;
  std::string file_;            // the file being read, when there are several
  std::vector<LogFile> files_;  // read, oldest first
  bool read_whole_ = false;     // every file read: its findings stand
};

void Forensics::OnLine(absl::string_view line, int64_t line_no, bool too_long) {
  ParsedLine p;
  if (too_long) {
    p.record.line = line_no;
    p.problem = absl::StrCat("line ", line_no, ": longer than ", kMaxLineBytes,
                             " bytes");
  } else {
    p = format_.Parse(line, line_no);
  }
  if (!file_.empty()) {
    p.record.file = file_;
    if (p.kind == LineKind::kUnreadable) p.problem = file_ + " " + p.problem;
  }
  report_.CountLine(p);
  if (p.kind != LineKind::kRecord) return;
  const Judgement j = JudgeRequest(p.record, rules_);
  const std::string window = report_.AddRequest(p.record, j);
  if (!j.flagged()) return;
  Finding f = FlaggedFinding(p.record, j, rules_, window);
  report_.AddFlagged(f);
  r_.findings.push_back(std::move(f));
}

absl::Status Forensics::RecordStart() {
  json floor = {{"us_per_token", rules_.floor.us_per_token},
                {"from_flag", rules_.floor.from_flag},
                {"source", rules_.floor.source},
                {"calibration", rules_.floor.evidence}};
  json files = json::array();
  for (const LogFile& f : files_) {
    files.push_back(
        {{"path", f.path}, {"sha256", f.sha256}, {"size_bytes", f.size_bytes}});
  }
  const LogFile& main = files_.back();  // --log itself
  return log_->Record("campaign_start",
                      {{"command", "forensics"},
                       {"log", o_.log_path},
                       {"log_sha256", main.sha256},
                       {"log_size_bytes", main.size_bytes},
                       {"log_files", files},
                       {"log_format", format_.name()},
                       {"mapping", o_.mapping_path},
                       {"format_spec", format_.spec()},
                       {"input_limit", o_.input_limit},
                       {"calibration_target", o_.calibration_target},
                       {"ttft_floor", floor},
                       {"window_s", absl::ToDoubleSeconds(o_.window)}},
                      true);
}

// Reads --log's rotated files, oldest first, then --log itself.
absl::Status Forensics::ReadAll() {
  const std::vector<std::string> paths = LogFiles(o_.log_path);
  for (const std::string& path : paths) {
    file_ = paths.size() > 1 ? path : "";
    ASSIGN_OR_RETURN(
        LogFile stats,
        ReadLog(path, [this](absl::string_view line, int64_t n, bool too_long) {
          OnLine(line, n, too_long);
        }));
    if (o_.progress) {
      std::fprintf(stderr,
                   "[kvcanary-auditor] forensics: read %s (%lld bytes)\n",
                   path.c_str(), static_cast<long long>(stats.size_bytes));
    }
    files_.push_back(std::move(stats));
  }
  file_.clear();
  return absl::OkStatus();
}

absl::Status Forensics::Steps() {
  if (o_.input_limit < 1) {
    return absl::InvalidArgumentError("--input-limit must be >= 1");
  }
  if (o_.window < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError("--window must be >= 0.001 s");
  }
  ASSIGN_OR_RETURN(format_, LogFormat::Load(o_.format, o_.mapping_path));
  ASSIGN_OR_RETURN(const TtftFloor floor, FindFloor(o_));
  rules_ = MakeRuleSet(format_, o_.input_limit, floor);
  report_.SetRules(rules_, format_.name());
  ASSIGN_OR_RETURN(log_, EvidenceLog::Open(o_.db_path, r_.campaign_id));
  r_.audit_started = true;  // the start checks passed: the log is read
  RETURN_IF_ERROR(ReadAll());
  read_whole_ = true;
  report_.SetFiles(files_);
  RETURN_IF_ERROR(RecordStart());
  for (const Finding& f : r_.findings) {
    metrics_->CountFinding(f.kind, SeverityName(f.severity));
    RETURN_IF_ERROR(log_->Record("finding", f.ToJson()));
  }
  return log_->Flush();
}

void Forensics::Finish(const absl::Status& run) {
  r_.ended_us = NowUs();
  if (run.ok()) {
    r_.detectors = {report_.Coverage(r_.findings.size())};
    r_.tenants = report_.Tenants();
    r_.checks = report_.Checks();
    r_.details = report_.Details();
  } else if (!read_whole_) {
    // Floors of a log read in part, never appended to the evidence: no
    // finding is proven. Once read whole, they are (an evidence store that
    // then fails is the error beside them).
    r_.findings.clear();
  }
  DecideResult(&r_, run, {});
  SealResult(&r_, log_.get(), report_.EndFields(), metrics_);
}

CampaignResult Forensics::Run() {
  StartResult(&r_, "forensics", o_.log_path, {}, o_.db_path, {"log_forensics"},
              metrics_);
  Finish(Steps());
  return std::move(r_);
}

}  // namespace

CampaignResult RunForensics(const ForensicsOptions& options,
                            AuditorMetrics* metrics) {
  return Forensics(options, metrics).Run();
}

}  // namespace kvcanary::auditor
