#include "auditor/detectors/detectors.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "auditor/detectors/test_break.h"
#include "common/check.h"

namespace kvcanary::auditor {
namespace {

std::vector<std::string> Words(absl::string_view text) {
  std::vector<std::string> words;
  std::string cur;
  for (char c : text) {
    if (absl::ascii_isalpha(static_cast<unsigned char>(c))) {
      cur.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
    } else if (!cur.empty()) {
      words.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  return words;
}

// The runs of the probing tenant's own markers in the scanned text.
std::vector<canaries::MarkerRun> OwnRuns(
    const std::vector<canaries::MarkerHit>& hits,
    const std::string& probe_tenant) {
  std::vector<canaries::MarkerRun> own;
  for (const canaries::MarkerHit& hit : hits) {
    if (hit.marker_id.empty() || hit.owner != probe_tenant) continue;
    own.insert(own.end(), hit.runs.begin(), hit.runs.end());
  }
  return own;
}

// Whether `outer` spans the text of `run`.
bool SpansText(const canaries::MarkerRun& outer,
               const canaries::MarkerRun& run) {
  return outer.offset <= run.offset && run.end <= outer.end;
}

// Whether `outer`, a run of the same marker as `run`, holds its words.
bool HoldsWords(const canaries::MarkerRun& outer,
                const canaries::MarkerRun& run) {
  return outer.marker_word <= run.marker_word &&
         run.marker_word + run.words <= outer.marker_word + outer.words;
}

// The longest run of `hit`, another tenant's marker, that no leak-free
// cause explains; 0 if every run is explained. A run is explained when one
// of `own` (the reader's own markers) spans its text, or when the probe's
// prompt (scanned: `prompt_hits`) holds the same words of the same marker.
int UnexplainedWords(const canaries::MarkerHit& hit,
                     const std::vector<canaries::MarkerRun>& own,
                     const std::vector<canaries::MarkerHit>& prompt_hits) {
  std::vector<canaries::MarkerRun> sent;
  for (const canaries::MarkerHit& p : prompt_hits) {
    if (p.marker_id == hit.marker_id) sent = p.runs;
  }
  int longest = 0;
  for (const canaries::MarkerRun& run : hit.runs) {
    auto explains = [&run](const canaries::MarkerRun& o) {
      return SpansText(o, run);
    };
    auto holds = [&run](const canaries::MarkerRun& s) {
      return HoldsWords(s, run);
    };
    if (std::any_of(own.begin(), own.end(), explains) ||
        std::any_of(sent.begin(), sent.end(), holds)) {
      continue;
    }
    longest = std::max(longest, run.words);
  }
  return longest;
}

}  // namespace

std::vector<Finding> ScanOutput(const canaries::MarkerScanner& scanner,
                                absl::string_view output,
                                const std::string& probe_tenant,
                                const std::string& probe_kind,
                                absl::string_view prompt) {
  std::vector<Finding> out;
  if (TestBroken("output_scan")) return out;
  const std::vector<canaries::MarkerHit> hits = scanner.Scan(output);
  const std::vector<canaries::MarkerRun> own = OwnRuns(hits, probe_tenant);
  std::optional<std::vector<canaries::MarkerHit>> prompt_hits;  // lazily
  for (const canaries::MarkerHit& hit : hits) {
    if (!hit.marker_id.empty() && hit.owner == probe_tenant) continue;
    int words = hit.words_matched;
    if (!hit.marker_id.empty()) {
      if (!prompt_hits.has_value()) prompt_hits = scanner.Scan(prompt);
      words = UnexplainedWords(hit, own, *prompt_hits);
      if (words == 0) continue;
    }
    const bool exact = hit.exact && words == hit.words_matched;
    Finding f;
    f.detector = "output_scan";
    f.kind = hit.marker_id.empty() ? "foreign_marker_shape" : "foreign_marker";
    f.severity = exact ? Severity::kCritical : Severity::kHigh;
    f.detail = {{"probe_tenant", probe_tenant},
                {"probe_kind", probe_kind},
                {"marker", hit.marker_id},
                {"marker_owner", hit.owner},
                {"words_matched", words},
                {"exact", exact},
                {"output_sha256", Sha256Hex(output)}};
    f.reader = probe_tenant;
    f.writer = hit.owner;
    out.push_back(std::move(f));
  }
  return out;
}

std::optional<Finding> CompareGolden(int variant, absl::string_view expected,
                                     absl::string_view got,
                                     const std::string& tenant) {
  if (expected == got || TestBroken("golden")) return std::nullopt;
  Finding f;
  f.detector = "golden";
  f.kind = "golden_mismatch";
  f.severity = Severity::kMedium;
  f.detail = {{"tenant", tenant},
              {"variant", variant},
              {"expected_sha256", Sha256Hex(expected)},
              {"got_sha256", Sha256Hex(got)}};
  f.reader = tenant;
  f.group = {{"variant", variant}};
  return f;
}

std::optional<Finding> JudgeGoldenRates(int baseline_diverged, int baseline_n,
                                        int cross_diverged, int cross_n) {
  if (baseline_n < 10 || cross_n < 10 || TestBroken("golden")) {
    return std::nullopt;
  }
  const double p1 = static_cast<double>(baseline_diverged) / baseline_n;
  const double p2 = static_cast<double>(cross_diverged) / cross_n;
  const double pooled =
      static_cast<double>(baseline_diverged + cross_diverged) /
      (baseline_n + cross_n);
  const double se =
      std::sqrt(pooled * (1 - pooled) * (1.0 / baseline_n + 1.0 / cross_n));
  if (p2 - p1 < 0.05 || p2 - p1 <= 3 * se) return std::nullopt;
  Finding f;
  f.detector = "golden";
  f.kind = "golden_divergence_rate";
  f.severity = Severity::kHigh;
  f.detail = {{"baseline_diverged", baseline_diverged},
              {"baseline_probes", baseline_n},
              {"cross_tenant_diverged", cross_diverged},
              {"cross_tenant_probes", cross_n},
              {"standard_error", se}};
  return f;
}

std::optional<Finding> CheckEcho(const canaries::Marker& nonce,
                                 absl::string_view output,
                                 const std::string& tenant) {
  if (TestBroken("echo")) return std::nullopt;
  const std::vector<std::string> nonce_words = Words(nonce.text);
  for (const std::string& w : Words(output)) {
    for (const std::string& n : nonce_words) {
      if (w == n) return std::nullopt;
    }
  }
  Finding f;
  f.detector = "echo";
  f.kind = "echo_failure";
  f.severity = Severity::kHigh;
  f.detail = {{"tenant", tenant},
              {"nonce", nonce.id},
              {"output_sha256", Sha256Hex(output)}};
  f.reader = tenant;
  return f;
}

std::vector<Finding> JudgeBoundary(const BoundaryObservation& o) {
  std::vector<Finding> out;
  if (o.http_status != 200 || TestBroken("boundary")) return out;
  auto make = [&o](const char* kind) {
    Finding f;
    f.detector = "boundary";
    f.kind = kind;
    f.severity = Severity::kHigh;
    f.reader = o.tenant;
    f.group = {{"template", o.template_name}};
    f.detail = {{"tenant", o.tenant},
                {"template", o.template_name},
                {"predicted_prompt_tokens", o.predicted_prompt_tokens},
                {"limit", o.limit},
                {"reported_prompt_tokens", o.reported_prompt_tokens},
                {"http_status", o.http_status}};
    return f;
  };
  if (o.limit > 0 && o.predicted_prompt_tokens - o.tolerance > o.limit) {
    out.push_back(make("boundary_accepted"));
  }
  if (o.reported_prompt_tokens >= 0) {
    const int diff = o.reported_prompt_tokens - o.predicted_prompt_tokens;
    if (diff < -o.tolerance) {
      out.push_back(make("prompt_truncated"));
    } else if (diff > o.tolerance) {
      out.push_back(make("prompt_tokens_mismatch"));
    }
  }
  return out;
}

std::optional<Finding> JudgeLatency(const LatencyModel& m, int prompt_tokens,
                                    double ttft_ms, const std::string& tenant,
                                    const std::string& template_name,
                                    bool* judged) {
  if (judged != nullptr) *judged = false;
  if (!m.calibrated) return std::nullopt;
  const double prefill_ms = m.per_token_ms * prompt_tokens;
  if (prefill_ms < 1.0) return std::nullopt;  // too small to judge
  if (judged != nullptr) *judged = true;
  const double floor_ms = m.base_ms + 0.3 * prefill_ms;
  if (ttft_ms >= floor_ms || TestBroken("latency")) return std::nullopt;
  Finding f;
  f.detector = "latency";
  f.kind = "latency_implausible";
  f.severity = Severity::kMedium;
  f.reader = tenant;
  f.group = {{"template", template_name}};
  f.detail = {{"tenant", tenant},
              {"template", template_name},
              {"prompt_tokens", prompt_tokens},
              {"ttft_ms", ttft_ms},
              {"floor_ms", floor_ms},
              {"calibrated_base_ms", m.base_ms},
              {"calibrated_per_token_ms", m.per_token_ms}};
  return f;
}

}  // namespace kvcanary::auditor
