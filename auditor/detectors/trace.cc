// The trace detector: the engine's own page-access trace (kvt1/kvt2 lines
// from each node's GET /v1/trace, docs/trace-format.md) replayed into a
// shadow page ledger per node (auditor/trace/), which re-derives every read
// of a page another tenant or request wrote — independently of the
// engine's own stamp check, so it works with watermarks off. Its findings
// name whose data was read by whom, through the engine request ids the
// target reports. Disabled without --trace.
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "auditor/detectors/registry.h"
#include "auditor/trace/canned_trace.h"
#include "auditor/trace/follower.h"
#include "auditor/trace/join.h"
#include "common/http_server.h"
#include "common/status_macros.h"

namespace kvcanary::auditor {
namespace {

// A real TraceFollower following a local HTTP server that streams
// kCannedForeignRead; what its ledger found goes to `out` (up to 5 s for the
// foreign read to arrive: a loaded machine may take a while).
void FollowCannedTrace(FindingSink& out) {
  http::Server server;
  std::atomic<bool> done{false};
  server.Get("/v1/trace", [&done](const http::Request&, http::Response& res) {
    res.set_chunked_content_provider(
        "text/plain", [&done](size_t offset, http::DataSink& sink) {
          if (offset == 0) {
            sink.write(kCannedForeignRead, sizeof(kCannedForeignRead) - 1);
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
  if (!bound.ok()) return;
  server.Start();
  std::vector<LedgerFinding> found;
  {
    TraceFollower follower(absl::StrCat("http://127.0.0.1:", *bound));
    if (follower.Start().ok()) {
      for (int i = 0; i < 1000 && found.empty(); ++i) {
        found = follower.findings();
        if (found.empty()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
    }
    done = true;
    (void)follower.Stop(absl::ZeroDuration());
  }
  server.Stop();
  for (const LedgerFinding& f : found) out.Add(FromLedger(f, {}));
}

class TraceDetector : public DetectorOf<TraceDetector> {
 public:
  static DetectorSpec Spec() {
    DetectorSpec s;
    s.name = "trace";
    s.summary =
        "a page read whose bytes another tenant or request wrote, from the "
        "engine's own trace (--trace)";
    s.unit = "requests whose page reads were checked";
    s.order = 60;
    return s;
  }

  // Followed before calibration, so the ledgers see every page the
  // campaign touches.
  absl::Status Start(const DetectorSettings& s, CampaignIo&) override {
    for (const std::string& url : s.trace_urls) {
      followers_.push_back(
          std::make_unique<TraceFollower>(url, s.trace_token, s.trace_tls));
      RETURN_IF_ERROR(followers_.back()->Start());
    }
    return absl::OkStatus();
  }

  absl::Status Finish(CampaignIo& io, FindingSink& out) override {
    TraceCollection tc = CollectTraces(followers_, io.engine_requests);
    tally_ = std::move(tc.tally);
    nodes_ = std::move(tc.nodes);
    for (const TraceNodeStats& n : nodes_) {
      io.metrics->CountTraceEvents(static_cast<double>(n.events),
                                   static_cast<double>(n.dropped));
    }
    for (Finding& f : tc.findings) out.Add(std::move(f));
    return absl::OkStatus();
  }

  void Stop() override {
    for (auto& f : followers_) (void)f->Stop(absl::ZeroDuration());
  }

  // Runs whether or not --trace was given: the reader of the stream is the
  // same code either way.
  std::vector<ControlCase> Controls() const override {
    return {{"another tenant's unscrubbed page read, streamed by a node",
             FollowCannedTrace, [](const std::vector<Finding>& got) {
               for (const Finding& f : got) {
                 if (f.kind == "trace_foreign_tenant_read" &&
                     f.reader == "engine-tenant-1" &&
                     f.writer == "engine-tenant-2") {
                   return true;
                 }
               }
               return false;
             }}};
  }

  DetectorCoverage Coverage(int) const override {
    if (followers_.empty()) {
      DetectorCoverage d;
      d.disabled = "no --trace";
      return d;
    }
    return TraceCoverage(
        tally_, prepared() ? view().tenants : std::vector<std::string>{});
  }

  void Report(CampaignResult* r) const override { r->trace_nodes = nodes_; }

 private:
  std::vector<std::unique_ptr<TraceFollower>> followers_;
  TraceTally tally_;
  std::vector<TraceNodeStats> nodes_;
};
KVCANARY_REGISTER_DETECTOR(TraceDetector);

}  // namespace
}  // namespace kvcanary::auditor
