// Request logs as `forensics` reads them: one JSON object per line, its
// fields named by a log format — kvcanary's router access log (built in,
// `kvcanary`), or another engine's through a field mapping file
// (`--mapping FILE [--format NAME]`). docs/forensics.md describes the
// mapping file and the shipped examples (docs/forensics-mappings/).
//
// A line is a request record, blank, another event the format does not
// count (its `where` does not match), or unreadable: not a JSON object, or
// a mapped field of the wrong type. Problems name the line and the field,
// never the line's content (another engine's log may hold prompt text).
// A request id or tenant longer than kMaxIdBytes is cut to that length
// (at a UTF-8 boundary, ending "..."): a foreign log's names are bounded.
#ifndef KVCANARY_AUDITOR_AUDITS_FORENSICS_LOG_H_
#define KVCANARY_AUDITOR_AUDITS_FORENSICS_LOG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// The longest request id or tenant name kept, bytes.
inline constexpr size_t kMaxIdBytes = 128;

// The canonical fields, named as in the router's access log (docs/api.md).
inline constexpr const char* kLogFields[] = {"ts",
                                             "request_id",
                                             "tenant",
                                             "status",
                                             "prompt_tokens",
                                             "completion_tokens",
                                             "cached_tokens",
                                             "ttft_ms",
                                             "total_ms",
                                             "finish_reason",
                                             "stream",
                                             "prefill_outcome",
                                             "decode_outcome",
                                             "reason"};

// One request as the log recorded it; a field the line does not carry (or
// carries as null) is absent.
struct LogRecord {
  int64_t line = 0;  // 1-based line number in the file
  // The file, when the log is several (rotated) files; set by the reader.
  std::string file;
  std::optional<int64_t> ts_us;  // Unix microseconds
  std::optional<std::string> request_id;
  std::optional<std::string> tenant;
  std::optional<int> status;  // HTTP status
  std::optional<int64_t> prompt_tokens, completion_tokens, cached_tokens;
  std::optional<double> ttft_ms, total_ms;
  std::optional<std::string> finish_reason;
  std::optional<bool> stream;
  // What each node reported: "ok", or the error or abort it recorded.
  std::optional<std::string> prefill_outcome, decode_outcome;
  std::optional<std::string> reason;  // why the request failed, if it did
};

enum class LineKind { kRecord, kBlank, kOtherEvent, kUnreadable };

struct ParsedLine {
  LineKind kind = LineKind::kUnreadable;
  LogRecord record;     // kRecord
  std::string problem;  // kUnreadable: which field, never the content
};

// A log's shape: where each canonical field is on a line. Immutable.
class LogFormat {
 public:
  // The router's access log: every canonical field under its own name.
  static LogFormat Kvcanary();
  // Format `name` of a mapping document {"formats": {NAME: {...}}}
  // (docs/forensics.md). kInvalidArgument naming the format and the field
  // for an unknown canonical field or a malformed spec; kNotFound (listing
  // the names there are) for a missing format.
  static absl::StatusOr<LogFormat> FromMapping(const nlohmann::json& mapping,
                                               const std::string& name);
  // `name` from the mapping file at `mapping_path`, or the built-in
  // `kvcanary` when no file is given. With a file, `name` "" or "kvcanary"
  // (the default) picks the file's only format; kInvalidArgument listing
  // the names when it has several.
  static absl::StatusOr<LogFormat> Load(const std::string& name,
                                        const std::string& mapping_path);

  const std::string& name() const { return name_; }
  // Whether the format says where `field` is (a path or a constant).
  bool Maps(absl::string_view field) const;
  ParsedLine Parse(absl::string_view line, int64_t line_no) const;
  // The mapping itself, for the evidence.
  const nlohmann::json& spec() const { return spec_; }

 private:
  struct FieldSpec {
    std::vector<std::string> paths;  // the first one present wins
    std::string minus;               // a path subtracted (timestamps)
    double scale = 1;                // numbers are multiplied by it
    nlohmann::json map;              // raw value (as text) -> value
    nlohmann::json fallback;         // for a raw value `map` lacks
    nlohmann::json constant;         // a fixed value for every line
  };
  static absl::StatusOr<FieldSpec> ParseSpec(const std::string& field,
                                             const nlohmann::json& spec);
  // The field's value on `line` after map/scale/minus; null if absent.
  nlohmann::json Extract(const FieldSpec& spec,
                         const nlohmann::json& line) const;
  bool Matches(const nlohmann::json& line) const;

  std::string name_;
  std::map<std::string, FieldSpec> fields_;
  nlohmann::json where_ = nlohmann::json::object();  // path -> value
  nlohmann::json spec_ = nlohmann::json::object();
};

// The value at a dotted path ("out.meta_info.prompt_tokens"); a key that
// itself holds dots is found too. nullptr json if absent.
const nlohmann::json* FindPath(const nlohmann::json& j, absl::string_view path);

// An RFC 3339 time ("2024-05-01T12:00:00.123Z", "+02:00" offsets), or an
// ISO 8601 one without an offset, read as UTC; Unix microseconds.
std::optional<int64_t> ParseLogTime(absl::string_view text);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_FORENSICS_LOG_H_
