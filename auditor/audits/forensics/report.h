// What `forensics` states about one log: lines read and unreadable,
// requests per tenant and time window with what each rule checked and
// flagged (floors: the log shows only what it recorded), the coverage of
// the log_forensics detector that decides the verdict, one check per rule
// and tenant, and the `forensics` section of the result document.
// Not thread-safe; owned by the command's thread.
#ifndef KVCANARY_AUDITOR_AUDITS_FORENSICS_REPORT_H_
#define KVCANARY_AUDITOR_AUDITS_FORENSICS_REPORT_H_

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "auditor/audits/forensics/forensics.h"
#include "auditor/audits/forensics/log.h"
#include "auditor/audits/forensics/rules.h"
#include "auditor/result/coverage.h"
#include "auditor/result/result.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// The name requests without a tenant are counted under.
inline constexpr char kNoTenant[] = "(no tenant)";

// Flagged request ids printed per signature (the rest are in the JSON).
inline constexpr size_t kIdsPrinted = 10;

// One file of the log as read: its rotated files, then --log itself.
struct LogFile {
  std::string path;
  std::string sha256;
  int64_t size_bytes = 0;
};

class ForensicsReport {
 public:
  explicit ForensicsReport(const ForensicsOptions& options)
      : options_(options) {}

  void SetRules(const RuleSet& rules, const std::string& format);
  // The files read, oldest first, --log itself last.
  void SetFiles(const std::vector<LogFile>& files);
  void CountLine(const ParsedLine& line);
  // Counts a judged request; returns its window's start as RFC 3339 ("" if
  // the line has no time).
  std::string AddRequest(const LogRecord& record, const Judgement& j);
  void AddFlagged(const Finding& f);

  // The log_forensics detector: required; per tenant with served requests,
  // those every required rule checked (floor 1). Inconclusive when lines
  // were unreadable, a required rule could not run, a rule could not check
  // some request, the log held no request, or none of its requests was
  // served.
  DetectorCoverage Coverage(size_t findings) const;
  // The tenants the log names (and kNoTenant if requests without one were
  // served).
  std::vector<std::string> Tenants() const;
  // One per rule and tenant (failed: flagged; error: could not check some;
  // skipped: the rule does not run), and one for the lines.
  std::vector<Check> Checks() const;
  nlohmann::json Details() const;
  nlohmann::json EndFields() const;  // for campaign_end

 private:
  using WindowKey = std::pair<std::string, int64_t>;  // tenant, start µs
  static constexpr int64_t kNoWindow = INT64_MIN;

  std::string RuleStateName(int rule) const;
  std::string Method() const;
  std::string Statement(const std::string& tenant, const Tally& t) const;
  std::string ExposedLine() const;
  std::string LogLine() const;
  // "request ids, over_limit_served": the first kIdsPrinted ids flagged by
  // each signature, one plain field per signature that flagged any.
  void AddIdLines(nlohmann::json* details) const;
  nlohmann::json RulesJson() const;
  nlohmann::json CountsJson() const;

  const ForensicsOptions& options_;
  RuleSet rules_;
  std::string format_;
  std::vector<LogFile> files_;
  int64_t lines_ = 0, records_ = 0, blank_ = 0, other_events_ = 0,
          unreadable_ = 0;
  std::vector<std::string> unreadable_first_;  // the first few problems
  Tally total_;
  std::map<std::string, Tally> by_tenant_;
  std::map<WindowKey, Tally> by_window_;
  std::array<std::set<std::string>, kNumRules> missing_;  // fields missing
  nlohmann::json flagged_ = nlohmann::json::array();
};

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_FORENSICS_REPORT_H_
