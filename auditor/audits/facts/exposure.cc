#include "auditor/audits/facts/exposure.h"

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

// Whether `token` occurs in `text` with no letter, digit, '-' or '_'
// either side (so "cmpl-12" is not found inside "cmpl-123").
bool HasToken(absl::string_view text, absl::string_view token) {
  auto part = [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
           c == '_';
  };
  for (size_t at = text.find(token); at != absl::string_view::npos;
       at = text.find(token, at + 1)) {
    const size_t end = at + token.size();
    if ((at == 0 || !part(text[at - 1])) &&
        (end == text.size() || !part(text[end]))) {
      return true;
    }
  }
  return false;
}

void CollectPromptLike(const json& j, int depth, std::set<std::string>* out) {
  static const std::set<std::string> kNames = {"prompt", "prompts", "generated",
                                               "generated_text", "messages"};
  if (depth > 8) return;
  if (j.is_array()) {
    for (const json& e : j) CollectPromptLike(e, depth + 1, out);
    return;
  }
  if (!j.is_object()) return;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const json& v = it.value();
    const bool text = (v.is_string() && !v.get<std::string>().empty()) ||
                      (v.is_array() && !v.empty());
    if (text && kNames.count(it.key())) out->insert(it.key());
    CollectPromptLike(v, depth + 1, out);
  }
}

}  // namespace

std::string PlantPrompt(const canaries::Marker& marker) {
  return absl::StrCat("Keep this note for later: ", marker.text,
                      ". The note ends here.");
}

std::optional<ExposureHit> FindPlant(const canaries::MarkerScanner& scanner,
                                     const FactsPlant& plant,
                                     const EndpointRead& read) {
  if (!read.answered() || read.body.empty()) return std::nullopt;
  for (const canaries::MarkerHit& h : scanner.Scan(read.body)) {
    if (h.marker_id != plant.marker.id) continue;
    if (!h.exact && h.words_matched < kExposureMinWords) continue;
    return ExposureHit{"prompt_exposed", "marker", h.words_matched, h.exact};
  }
  // A response id shorter than this could be a common word or number.
  if (plant.response_id.size() >= 6 && HasToken(read.body, plant.response_id)) {
    return ExposureHit{"activity_exposed", "response_id", 0, false};
  }
  return std::nullopt;
}

Finding ExposureFinding(const FactsPlant& plant, const ReadSpec& where,
                        const ExposureHit& hit, int http_status,
                        const std::string& body_sha256) {
  Finding f;
  f.detector = "exposure";
  f.kind = hit.kind;
  f.severity = where.node ? Severity::kHigh : Severity::kCritical;
  f.reader = where.reader;
  f.writer = plant.writer;
  f.probe = plant.probe;
  f.engine_request = plant.engine_request;
  f.group = {{"node", EndpointName(where)}};
  f.detail = {{"endpoint", where.path},
              {"base", where.node ? where.base : "target"},
              {"reader_key", where.reader == kNoKeyReader ? "none" : "tenant"},
              {"found", hit.what},
              {"marker", plant.marker.id},
              {"http_status", http_status},
              {"probe", plant.probe}};
  if (hit.what == "marker") {
    f.detail["words_matched"] = hit.words_matched;
    f.detail["exact"] = hit.exact;
  }
  if (!body_sha256.empty()) f.detail["body_sha256"] = body_sha256;
  if (plant.engine_request != 0) {
    f.detail["engine_request"] = plant.engine_request;
  }
  return f;
}

std::vector<std::string> PromptLikeFields(const EndpointRead& read) {
  if (read.status != 200) return {};
  const json j = json::parse(read.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return {};
  std::set<std::string> names;
  CollectPromptLike(j, 0, &names);
  return {names.begin(), names.end()};
}

}  // namespace kvcanary::auditor
