#include "auditor/campaign/positive_controls.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "auditor/detectors/detectors.h"
#include "auditor/target/completion.h"
#include "auditor/trace/follower.h"
#include "common/http_server.h"

namespace kvcanary::auditor {
namespace {

// The incident in miniature, as an engine node would stream it (kvt1).
constexpr const char* kCannedTrace =
    "kvt1 page_alloc seq=1 ts_us=10 node=decode page=1 gen=1 tenant=2 "
    "request=7\n"
    "kvt1 page_write seq=2 ts_us=11 node=decode page=1 gen=1 tenant=2 "
    "request=7 first_slot=0 last_slot_exclusive=16 writer_gen=1\n"
    "kvt1 page_free seq=3 ts_us=12 node=decode page=1 gen=1 tenant=2 "
    "request=7 scrub=none\n"
    "kvt1 page_alloc seq=4 ts_us=13 node=decode page=1 gen=2 tenant=1 "
    "request=8\n"
    "kvt1 page_read seq=5 ts_us=14 node=decode request=8 tenant=1 page=1 "
    "gen=2 slots=16\n";

ProbeResponse Canned(int status, std::string body) {
  ProbeResponse r;
  r.status = status;
  r.body = std::move(body);
  r.first_byte = absl::Milliseconds(1);
  r.total = absl::Milliseconds(2);
  return r;
}

bool OutputScanControl(const ControlInputs& in) {
  const std::string& reader = in.tenants[0];
  const std::string& writer = in.tenants[1];
  const auto foreign = ScanOutput(
      *in.scanner, absl::StrCat("and then ", in.markers[1].text, " the end"),
      reader, "sniff");
  bool named = false;
  for (const Finding& f : foreign) {
    named = named || (f.kind == "foreign_marker" && f.writer == writer &&
                      f.reader == reader);
  }
  const auto own = ScanOutput(*in.scanner, in.markers[0].text, reader, "plant");
  return named && own.empty();
}

bool GoldenControl(const Calibration& c, const std::string& tenant) {
  const auto& [variant, answer] = *c.golden.begin();
  return CompareGolden(variant, answer, answer + " and a dragon", tenant)
             .has_value() &&
         !CompareGolden(variant, answer, answer, tenant).has_value() &&
         JudgeGoldenRates(2, 40, 20, 40).has_value() &&
         !JudgeGoldenRates(4, 40, 5, 40).has_value();
}

bool EchoControl(const Calibration& c, const std::vector<std::string>& names) {
  for (size_t t = 0; t < c.nonces.size(); ++t) {
    if (!c.nonces[t]) continue;
    const canaries::Marker& nonce = *c.nonces[t];
    return CheckEcho(nonce, "1, 2, 3.", names[t]).has_value() &&
           !CheckEcho(nonce, absl::StrCat("The ", nonce.text, "."), names[t])
                .has_value();
  }
  return false;
}

// The boundary judgement on canned answers read by the real parser: a 200
// past the limit, a silent truncation, and a refusal sent inside a 200
// stream (which must read as a refusal, not as a 200).
bool BoundaryControl(const Calibration& c, const std::string& tenant) {
  const int limit = c.limit.refuse_above;
  const int past = limit + 2 * c.unit_tokens;
  auto judge = [&](const ProbeResponse& r, bool stream, int predicted) {
    const Completion got = ParseCompletion(r, stream);
    BoundaryObservation o{
        predicted,   limit,  got.status, got.usable ? got.prompt_tokens : -1,
        c.tolerance, tenant, "control"};
    std::vector<std::string> kinds;
    for (const Finding& f : JudgeBoundary(o)) kinds.push_back(f.kind);
    return std::make_pair(got, kinds);
  };
  const std::string accepted = absl::StrCat(
      R"({"id":"cmpl-1","choices":[{"text":" ok"}],"usage":{"prompt_tokens":)",
      past, "}}");
  const auto [a, a_kinds] = judge(Canned(200, accepted), false, past);
  const std::string cut =
      absl::StrCat(R"({"choices":[{"text":" ok"}],"usage":{"prompt_tokens":)",
                   limit / 2, "}}");
  const auto [t, t_kinds] = judge(Canned(200, cut), false, limit);
  const auto [s, s_kinds] =
      judge(Canned(200,
                   "data: {\"error\":{\"message\":\"too long\",\"type\":"
                   "\"BadRequestError\",\"code\":400}}\n\ndata: [DONE]\n\n"),
            true, past);
  const auto [e, e_kinds] =
      judge(Canned(200,
                   "error: {\"code\":400,\"message\":\"the request exceeds "
                   "the available context size\",\"type\":"
                   "\"exceed_context_size_error\"}\n\n"),
            true, past);
  return a_kinds == std::vector<std::string>{"boundary_accepted"} &&
         t_kinds == std::vector<std::string>{"prompt_truncated"} &&
         s.status == 400 && s_kinds.empty() && e.status == 400 &&
         e_kinds.empty();
}

bool LatencyControl(const Calibration& c, const std::string& tenant) {
  const LatencyModel& m = c.latency;
  const int tokens = c.base_tokens + c.at_limit_units * c.unit_tokens;
  const double plausible = m.base_ms + m.per_token_ms * tokens;
  bool judged = false;
  const bool fires =
      JudgeLatency(m, tokens, 0.0, tenant, "control", &judged).has_value();
  return judged && fires &&
         !JudgeLatency(m, tokens, plausible, tenant, "control").has_value();
}

}  // namespace

bool TraceControlFires() {
  http::Server server;
  std::atomic<bool> done{false};
  server.Get("/v1/trace", [&done](const http::Request&, http::Response& res) {
    res.set_chunked_content_provider(
        "text/plain", [&done](size_t offset, http::DataSink& sink) {
          if (offset == 0) {
            sink.write(kCannedTrace,
                       std::char_traits<char>::length(kCannedTrace));
          }
          // Held open like a live node's stream, until the control ends.
          for (int i = 0; i < 200 && !done.load(); ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
          if (done.load()) sink.done();
          return true;
        });
  });
  auto bound = server.Bind("127.0.0.1", 0);
  if (!bound.ok()) return false;
  const int port = *bound;
  server.Start();
  bool fired = false;
  {
    TraceFollower follower(absl::StrCat("http://127.0.0.1:", port));
    if (follower.Start().ok()) {
      // Up to 5 s: a loaded machine may take a while to deliver 5 lines.
      for (int i = 0; i < 1000 && !fired; ++i) {
        for (const LedgerFinding& f : follower.findings()) {
          fired = fired || (f.kind == LedgerFindingKind::kForeignTenantRead &&
                            f.reader.tenant == TenantId(1) &&
                            f.writer.tenant == TenantId(2));
        }
        if (!fired) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    done = true;
    (void)follower.Stop(absl::ZeroDuration());
  }
  server.Stop();
  return fired;
}

std::map<std::string, bool> RunPositiveControls(const ControlInputs& in) {
  std::map<std::string, bool> passed;
  const Calibration& c = *in.calibration;
  const std::string& tenant = in.tenants[0];
  passed["output_scan"] = OutputScanControl(in);
  if (!c.golden.empty()) passed["golden"] = GoldenControl(c, tenant);
  if (c.echo_disabled.empty()) passed["echo"] = EchoControl(c, in.tenants);
  if (c.unit_tokens > 0 && c.limit.refuse_above > 0) {
    passed["boundary"] = BoundaryControl(c, tenant);
  }
  if (c.latency.calibrated) passed["latency"] = LatencyControl(c, tenant);
  passed["trace"] = TraceControlFires();
  return passed;
}

}  // namespace kvcanary::auditor
