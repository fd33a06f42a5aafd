#include "auditor/result/finding.h"

#include "absl/strings/str_cat.h"

namespace kvcanary::auditor {

const char* SeverityName(Severity s) {
  switch (s) {
    case Severity::kLow:
      return "low";
    case Severity::kMedium:
      return "medium";
    case Severity::kHigh:
      return "high";
    case Severity::kCritical:
      return "critical";
  }
  return "unknown";
}

Severity SeverityFromName(const std::string& s) {
  if (s == "critical") return Severity::kCritical;
  if (s == "high") return Severity::kHigh;
  if (s == "medium") return Severity::kMedium;
  return Severity::kLow;
}

nlohmann::json Finding::ToJson() const {
  return {{"kind", kind},
          {"severity", SeverityName(severity)},
          {"detector", detector},
          {"probe", probe},
          {"engine_request", engine_request},
          {"reader", reader},
          {"writer", writer},
          {"writer_joined", writer_joined},
          {"group", group},
          {"ts_us", ts_us},
          {"detail", detail}};
}

Finding Finding::FromJson(const nlohmann::json& b) {
  Finding f;
  if (!b.is_object()) return f;
  f.kind = b.value("kind", "");
  f.severity = SeverityFromName(b.value("severity", "low"));
  f.detector = b.value("detector", "");
  f.probe = b.value("probe", int64_t{-1});
  f.engine_request = b.value("engine_request", uint64_t{0});
  f.reader = b.value("reader", "");
  f.writer = b.value("writer", "");
  f.writer_joined = b.value("writer_joined", false);
  f.group = b.value("group", nlohmann::json::object());
  f.ts_us = b.value("ts_us", int64_t{0});
  f.detail = b.value("detail", nlohmann::json::object());
  return f;
}

}  // namespace kvcanary::auditor
