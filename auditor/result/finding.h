// What the auditor found: a kind, a severity, the detector that found it,
// and details made of ids, hashes and timings only (never text the auditor
// did not write itself).
#ifndef KVCANARY_AUDITOR_RESULT_FINDING_H_
#define KVCANARY_AUDITOR_RESULT_FINDING_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

enum class Severity { kLow = 1, kMedium = 2, kHigh = 3, kCritical = 4 };
const char* SeverityName(Severity s);
// The severity a name stands for; low for an unknown one.
Severity SeverityFromName(const std::string& name);

struct Finding {
  std::string kind;  // e.g. "foreign_marker", "trace_foreign_tenant_read"
  Severity severity = Severity::kMedium;
  std::string detector;  // output_scan, golden, echo, boundary, latency, trace
  nlohmann::json detail = nlohmann::json::object();

  // What joins findings into incidents (auditor/result/incidents.h).
  int64_t ts_us = 0;   // when it was made, Unix microseconds
  int64_t probe = -1;  // the auditor's probe number; -1: none (trace, rates)
  uint64_t engine_request = 0;  // the reader's engine request id; 0: unknown
  std::string reader;          // the tenant who got the answer or read the page
  std::string writer;          // whose data it was ("" unknown)
  bool writer_joined = false;  // `writer` came from the trace (JoinWriters)
  // Grouping fields beyond detector, kind, reader and writer, e.g.
  // {"node": "decode"} or {"template": "past_limit"}.
  nlohmann::json group = nlohmann::json::object();

  // The body of its evidence row (`finding`), and back.
  nlohmann::json ToJson() const;
  static Finding FromJson(const nlohmann::json& body);
};

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_RESULT_FINDING_H_
