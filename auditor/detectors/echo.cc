#include "auditor/detectors/echo.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "auditor/detectors/registry.h"
#include "canaries/templates.h"
#include "common/sha256.h"

namespace kvcanary::auditor {
namespace {

// The lower-case words of `text` (runs of letters).
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
  f.reader = tenant;
  return f;
}

namespace {

class EchoDetector : public DetectorOf<EchoDetector> {
 public:
  static DetectorSpec Spec() {
    DetectorSpec s;
    s.name = "echo";
    s.summary =
        "an answer missing the nonce its prompt asked repeated (the prompt "
        "was not processed)";
    s.unit = "echo answers checked";
    s.order = 30;
    s.probes = {{ProbeKind::kEcho, 1.0}};
    return s;
  }
  void Judge(const Probe& p, const Completion& c, const std::vector<Finding>&,
             FindingSink& out) override {
    if (p.kind != ProbeKind::kEcho || !c.usable) return;
    const auto& nonce = view().calibration->nonces[p.tenant];
    if (!nonce.has_value()) return;  // never sent: the mix skips the tenant
    checked_.Add(p.tenant);
    auto e = CheckEcho(*nonce, c.text, tenant_name(p.tenant));
    if (e.has_value()) out.Add(*std::move(e));
  }

  // The first echoing nonce: an answer without it (a finding) and one that
  // repeats it (none).
  std::vector<ControlCase> Controls() const override {
    if (!prepared()) return {};
    const Calibration& cal = *view().calibration;
    if (!cal.echo_disabled.empty()) return {};
    for (size_t t = 0; t < cal.nonces.size(); ++t) {
      if (!cal.nonces[t]) continue;
      const canaries::Marker nonce = *cal.nonces[t];
      const std::string tenant = view().tenants[t];
      auto judge = [nonce, tenant](std::string output) {
        return [nonce, tenant, output](FindingSink& out) {
          auto e = CheckEcho(nonce, output, tenant);
          if (e.has_value()) out.Add(*std::move(e));
        };
      };
      return {{"an answer without the nonce", judge("1, 2, 3."),
               [](const std::vector<Finding>& got) { return !got.empty(); }},
              {"an answer repeating it",
               judge(absl::StrCat("The ", nonce.text, ".")),
               [](const std::vector<Finding>& got) { return got.empty(); }}};
    }
    return {};  // no nonce echoed alone: the coverage says so
  }

  DetectorCoverage Coverage(int) const override {
    DetectorCoverage d;
    if (!prepared()) return d;
    const Calibration& cal = *view().calibration;
    d.coverage = checked_.Named(view().tenants);
    d.disabled = cal.echo_disabled;
    if (!cal.echo_failure.empty()) d.AddFailure(cal.echo_failure);
    int echoing = 0;
    for (size_t t = 0; t < cal.nonces.size(); ++t) {
      if (cal.nonces[t]) {
        ++echoing;
      } else if (d.disabled.empty() && cal.echo_failure.empty()) {
        d.AddFailure(
            absl::StrCat("no nonce of ", view().tenants[t], " echoed alone"));
      }
    }
    d.stats = {{"tenants_with_echoing_nonce", echoing},
               {"wording", canaries::WordingName(cal.wording)}};
    return d;
  }

 private:
  TenantCounts checked_;
};
KVCANARY_REGISTER_DETECTOR(EchoDetector);

}  // namespace
}  // namespace kvcanary::auditor
