#include "auditor/detectors.h"

#include <openssl/sha.h>

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "auditor/shadow_ledger.h"
#include "common/check.h"

namespace kvcanary::auditor {
std::string Sha256Hex(absl::string_view text) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), md);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : md) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

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

}  // namespace

std::vector<Finding> ScanOutput(const canaries::MarkerScanner& scanner,
                                absl::string_view output,
                                const std::string& probe_tenant,
                                const std::string& probe_kind) {
  std::vector<Finding> out;
  for (const canaries::MarkerHit& hit : scanner.Scan(output)) {
    if (!hit.marker_id.empty() && hit.owner == probe_tenant) continue;
    Finding f;
    f.detector = "output_scan";
    f.kind = hit.marker_id.empty() ? "foreign_marker_shape" : "foreign_marker";
    f.severity = hit.exact ? Severity::kCritical : Severity::kHigh;
    f.detail = {{"probe_tenant", probe_tenant},
                {"probe_kind", probe_kind},
                {"marker", hit.marker_id},
                {"marker_owner", hit.owner},
                {"words_matched", hit.words_matched},
                {"exact", hit.exact},
                {"output_sha256", Sha256Hex(output)}};
    out.push_back(std::move(f));
  }
  return out;
}

std::optional<Finding> CompareGolden(int variant, absl::string_view expected,
                                     absl::string_view got,
                                     const std::string& tenant) {
  if (expected == got) return std::nullopt;
  Finding f;
  f.detector = "golden";
  f.kind = "golden_mismatch";
  f.severity = Severity::kMedium;
  f.detail = {{"tenant", tenant},
              {"variant", variant},
              {"expected_sha256", Sha256Hex(expected)},
              {"got_sha256", Sha256Hex(got)}};
  return f;
}

std::optional<Finding> JudgeGoldenRates(int baseline_diverged, int baseline_n,
                                        int cross_diverged, int cross_n) {
  if (baseline_n < 10 || cross_n < 10) return std::nullopt;
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
  return f;
}

std::vector<Finding> JudgeBoundary(const BoundaryObservation& o) {
  std::vector<Finding> out;
  if (o.http_status != 200) return out;
  nlohmann::json detail = {
      {"tenant", o.tenant},
      {"predicted_prompt_tokens", o.predicted_prompt_tokens},
      {"advertised_limit", o.advertised_limit},
      {"reported_prompt_tokens", o.reported_prompt_tokens},
      {"http_status", o.http_status}};
  if (o.advertised_limit > 0 &&
      o.predicted_prompt_tokens > o.advertised_limit) {
    Finding f;
    f.detector = "boundary";
    f.kind = "boundary_accepted";
    f.severity = Severity::kHigh;
    f.detail = detail;
    out.push_back(std::move(f));
  }
  if (o.reported_prompt_tokens >= 0 &&
      o.reported_prompt_tokens != o.predicted_prompt_tokens) {
    Finding f;
    f.detector = "boundary";
    f.kind = "prompt_tokens_mismatch";
    f.severity = Severity::kHigh;
    f.detail = detail;
    out.push_back(std::move(f));
  }
  return out;
}

std::optional<Finding> JudgeLatency(const LatencyModel& m, int prompt_tokens,
                                    double ttft_ms, const std::string& tenant) {
  if (!m.calibrated) return std::nullopt;
  const double prefill_ms = m.per_token_ms * prompt_tokens;
  if (prefill_ms < 1.0) return std::nullopt;  // too small to judge
  const double floor_ms = m.base_ms + 0.3 * prefill_ms;
  if (ttft_ms >= floor_ms) return std::nullopt;
  Finding f;
  f.detector = "latency";
  f.kind = "latency_implausible";
  f.severity = Severity::kMedium;
  f.detail = {{"tenant", tenant},
              {"prompt_tokens", prompt_tokens},
              {"ttft_ms", ttft_ms},
              {"floor_ms", floor_ms},
              {"calibrated_base_ms", m.base_ms},
              {"calibrated_per_token_ms", m.per_token_ms}};
  return f;
}

std::map<std::string, bool> RunPositiveControls() {
  std::map<std::string, bool> fired;
  const std::string key = "positive-control-key";
  // output_scan: tenant b's output holds tenant a's marker.
  {
    canaries::MarkerScanner scanner(canaries::kDefaultMinPartialWords);
    const canaries::Marker a = canaries::DeriveMarker(key, "pc-a", "pc", 1);
    scanner.Add(a, "pc-a");
    fired["output_scan"] =
        scanner.Compile().ok() &&
        !ScanOutput(scanner, "and then " + a.text + " the end", "pc-b", "sniff")
             .empty() &&
        ScanOutput(scanner, "and then " + a.text, "pc-a", "sniff").empty();
  }
  fired["golden"] =
      CompareGolden(0, "the cat sat", "the cat ran", "pc-a").has_value() &&
      !CompareGolden(0, "same", "same", "pc-a").has_value() &&
      JudgeGoldenRates(2, 40, 20, 40).has_value() &&
      !JudgeGoldenRates(4, 40, 5, 40).has_value();
  {
    const canaries::Marker nonce = canaries::DeriveNonce(key, "pc-a", "pc", 1);
    fired["echo"] = CheckEcho(nonce, "zzz qqq", "pc-a").has_value() &&
                    !CheckEcho(nonce, nonce.text, "pc-a").has_value();
  }
  {
    BoundaryObservation over{300, 256, 200, 300, "pc-a"};
    BoundaryObservation truncated{200, 256, 200, 120, "pc-a"};
    BoundaryObservation fine{200, 256, 200, 200, "pc-a"};
    fired["boundary"] = !JudgeBoundary(over).empty() &&
                        !JudgeBoundary(truncated).empty() &&
                        JudgeBoundary(fine).empty();
  }
  {
    LatencyModel m{true, 2.0, 0.05};
    fired["latency"] = JudgeLatency(m, 400, 2.1, "pc-a").has_value() &&
                       !JudgeLatency(m, 400, 30.0, "pc-a").has_value();
  }
  {
    // The incident in miniature: tenant 2 writes page 1, frees it
    // unscrubbed; tenant 1 gets it and reads it without writing.
    ShadowLedger ledger;
    TraceEvent e;
    e.node = TraceNode::kDecode;
    e.page = PageId(1);
    e.type = TraceEventType::kPageAlloc;
    e.gen = PageGeneration(1);
    e.tenant = TenantId(2);
    e.request = RequestId(7);
    ledger.Apply(e);
    e.type = TraceEventType::kPageWrite;
    e.first_slot = 0;
    e.last_slot_exclusive = 16;
    e.writer_gen = e.gen;
    ledger.Apply(e);
    e.type = TraceEventType::kPageFree;
    ledger.Apply(e);
    e.type = TraceEventType::kPageAlloc;
    e.gen = PageGeneration(2);
    e.tenant = TenantId(1);
    e.request = RequestId(8);
    ledger.Apply(e);
    e.type = TraceEventType::kPageRead;
    e.slots = 16;
    const auto found = ledger.Apply(e);
    fired["trace"] = found.size() == 1 &&
                     found[0].kind == LedgerFindingKind::kForeignTenantRead &&
                     found[0].writer.tenant == TenantId(2);
  }
  return fired;
}

}  // namespace kvcanary::auditor
