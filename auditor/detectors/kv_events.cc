// The kv_events detector: white-box evidence of cross-tenant KV sharing
// from the engine's own KV-cache event stream (--kv-events; vLLM's and
// SGLang's --kv-events-config, and our engine's). After the campaign's
// load, tenant A plants a fresh prefix, tenant B sends it again with a
// witness suffix, and B sends a control; what the stream says B's request
// stored decides each pair (auditor/kv_events/pairs.h, docs/kv-events.md).
// Disabled without --kv-events; required wherever it applies.
#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "auditor/detectors/registry.h"
#include "auditor/kv_events/canned_publisher.h"
#include "auditor/kv_events/ledger.h"
#include "auditor/kv_events/pairs.h"
#include "auditor/kv_events/subscriber.h"
#include "common/status_macros.h"

namespace kvcanary::auditor {
namespace {

using kv_events::CannedStore;

// Token ids of a canned block: `block` of four.
std::vector<int64_t> Tokens(std::initializer_list<int> blocks) {
  std::vector<int64_t> out;
  for (int b : blocks) {
    for (int i = 0; i < 4; ++i) out.push_back(1000 * b + i);
  }
  return out;
}

// One canned pair streamed through a real Subscriber and Ledger: A stores
// blocks 1-2 (hashes 11, 12); B's probe stores the same tokens again —
// under A's very hashes with a cache hit reported (`shared`: the engine
// served A's blocks), or under hashes of its own with none (isolated) —
// and a witness block chained to them; B's control stores a block of its
// own. The pair is decided as a campaign decides one, and its findings go
// to `out`.
void StreamCannedPair(bool shared, FindingSink& out) {
  kv_events::CannedPublisher publisher;
  if (!publisher.Start().ok()) return;
  kv_events::SubscriberOptions so;
  so.endpoint = publisher.endpoint();
  so.replay_endpoint = publisher.replay_endpoint();
  kv_events::Ledger ledger;
  kv_events::Subscriber subscriber(so, &ledger);
  if (!subscriber.Start().ok()) return;
  // Each window is closed through the replay socket, whatever the PUB
  // socket delivered: no wait on the clock decides what a window holds.
  auto send = [&](const std::vector<CannedStore>& events) {
    publisher.Publish(kv_events::EncodeStoredBatch(events));
    (void)subscriber.Sync();
    return ledger.Now();
  };
  const uint64_t b1 = shared ? 11 : 21, b2 = shared ? 12 : 22;
  std::array<kv_events::Mark, 4> m;
  m[0] = send({});  // where the stream stands
  m[1] = send({{{11, 12}, std::nullopt, Tokens({1, 2})}});
  m[2] =
      send({{{b1, b2}, std::nullopt, Tokens({1, 2})}, {{23}, b2, Tokens({3})}});
  m[3] = send({{{31}, std::nullopt, Tokens({4})}});
  subscriber.Stop();
  kv_events::PairObservation o;
  o.plant = ledger.Between(m[0], m[1]);
  o.probe = ledger.Between(m[1], m[2]);
  o.after = ledger.Between(m[1], m[3]);
  o.control = ledger.Between(m[2], m[3]);
  o.plant_ok = o.probe_ok = o.control_ok = true;
  o.probe_cached_tokens = shared ? 8 : 0;
  o.control_cached_tokens = 0;
  kv_events::KvEventsOutcome outcome;
  outcome.writer = "control-writer";
  outcome.reader = "control-reader";
  outcome.requested_pairs = 1;
  outcome.pairs.push_back(kv_events::DecidePair(o));
  for (Finding& f : kv_events::KvEventsFindings(outcome)) out.Add(f);
}

class KvEventsDetector : public DetectorOf<KvEventsDetector> {
 public:
  static DetectorSpec Spec() {
    DetectorSpec s;
    s.name = "kv_events";
    s.summary =
        "one tenant's prompt served from another's cached KV blocks, from "
        "the engine's KV event stream (--kv-events)";
    s.unit = "probe pairs judged from the engine's KV events";
    s.order = 70;
    s.covers_every_tenant = false;  // the pairs' writer and reader
    s.finish_sends = true;          // the pairs
    return s;
  }

  // Followed from the start, so its counts cover the whole campaign; as
  // many pairs as its floor asks, at least the stream's own count.
  absl::Status Start(const DetectorSettings& s, CampaignIo&) override {
    if (s.kv_events.endpoint.empty()) return absl::OkStatus();
    enabled_ = true;
    kv_events::SubscriberOptions o = s.kv_events;
    o.pairs = std::max(o.pairs, Floor(s));
    check_ = std::make_unique<kv_events::KvEventsCheck>(o);
    return check_->Start();
  }

  // The pairs, between the first two tenants, after the load.
  absl::Status Finish(CampaignIo& io, FindingSink& out) override {
    if (check_ == nullptr) return absl::OkStatus();
    // A prefix of about a quarter of the limit in letters: several blocks.
    const int units = std::clamp(
        static_cast<int>(view().calibration->limit.prompt_tokens / 4), 16, 256);
    const std::vector<AuditTenant>& t = *io.tenants;
    ASSIGN_OR_RETURN(outcome_,
                     check_->Run(*io.target, t[0], t[1], units, io.log));
    io.metrics->CountKvEvents(kv_events::StreamCounts(outcome_->stream));
    for (Finding& f : kv_events::KvEventsFindings(*outcome_)) {
      out.Add(std::move(f));
    }
    return absl::OkStatus();
  }

  void Stop() override { check_.reset(); }

  // A canned pair whose blocks were served from A's (a finding) and one
  // whose blocks B stored again under its own hashes (none). Runs whether
  // or not --kv-events was given: the reader is the same code either way.
  std::vector<ControlCase> Controls() const override {
    return {{"B served A's cached blocks",
             [](FindingSink& out) { StreamCannedPair(true, out); },
             [](const std::vector<Finding>& got) {
               return got.size() == 1 &&
                      got[0].kind == "cross_tenant_kv_block_hit" &&
                      got[0].writer == "control-writer" &&
                      got[0].reader == "control-reader";
             }},
            {"B stored the same tokens under hashes of its own",
             [](FindingSink& out) { StreamCannedPair(false, out); },
             [](const std::vector<Finding>& got) { return got.empty(); }}};
  }

  // --floor's entry for it, else the pairs the stream asks for.
  int Floor(const DetectorSettings& s) const override {
    if (auto it = s.floors.find(spec().name); it != s.floors.end()) {
      return it->second;
    }
    return std::max(1, s.kv_events.pairs);
  }

  DetectorCoverage Coverage(int) const override {
    if (!enabled_) {
      DetectorCoverage d;
      d.disabled = "no --kv-events";
      return d;
    }
    if (!outcome_.has_value()) {
      DetectorCoverage d;
      d.AddFailure("its probe pairs did not run");
      return d;
    }
    return kv_events::KvEventsCoverage(*outcome_);
  }

  void Report(CampaignResult* r) const override {
    if (outcome_.has_value()) r->details["kv_events"] = outcome_->ToJson();
  }

 private:
  bool enabled_ = false;  // --kv-events given
  std::unique_ptr<kv_events::KvEventsCheck> check_;
  std::optional<kv_events::KvEventsOutcome> outcome_;
};
KVCANARY_REGISTER_DETECTOR(KvEventsDetector);

}  // namespace
}  // namespace kvcanary::auditor
