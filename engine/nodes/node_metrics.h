// The metrics of a node (router, prefill or decode), declared in one place;
// handles bound at startup, the hot path only increments. Served at
// GET /metrics in the Prometheus text format. Labels are bounded: role,
// outcome, endpoint; never a tenant or request id.
#ifndef KVCANARY_ENGINE_NODES_NODE_METRICS_H_
#define KVCANARY_ENGINE_NODES_NODE_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "engine/core/engine_loop.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace kvcanary::engine {

// Thread-safe (prometheus-cpp handles are).
class NodeMetrics {
 public:
  explicit NodeMetrics(const std::string& role);

  // One finished request, by outcome: "ok", "cancelled" (kCancelled: the
  // client, or for a node the router, went away before the answer ended),
  // or the status code's name.
  void CountRequest(const absl::Status& status);
  void CountTransfer(uint64_t bytes, const absl::Status& status);
  // Watermark violations of one finished request, by kind.
  void CountViolations(const std::vector<WatermarkViolation>& violations);
  // A KV connection refused before it could touch a reservation, by
  // reason: "authentication", "tls", "peer cap", "pre-auth cap",
  // "connection cap", "no matching reservation".
  void CountKvRefused(const char* reason);
  // kvcanary_node_kv_unauthenticated_connections: KV connections accepted
  // that have not authenticated yet; kvcanary_node_kv_idle_sessions:
  // authenticated sessions waiting for their next transfer (decode).
  void SetKvPort(int unauthenticated, int idle_sessions);
  // Registers kvcanary_engine_kv_events_dropped_total: a node that
  // publishes KV cache events does, at start.
  void AddKvEventsMetrics();
  // Brings that counter up to `total` events dropped so far.
  void SetKvEventsDropped(uint64_t total);
  // Brings kvcanary_node_connections_total{how="opened"|"reused"} up to
  // these totals: connections to the decode nodes, opened or reused from a
  // pool of idle ones: the router's for requests (NodePool), the prefill
  // node's KV sessions for transfers (KvSender).
  void SetNodeConnections(uint64_t opened, uint64_t reused);
  // Refreshes gauges from an engine loop, then serializes everything.
  std::string Serialize(const EngineLoop* loop);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Counter* transfer_bytes_;
  prometheus::Counter* transfer_failures_;
  prometheus::Counter* transfers_ok_;
  prometheus::Gauge* pages_used_;
  prometheus::Gauge* pages_free_;
  prometheus::Gauge* pages_cached_;
  prometheus::Counter* prefix_hits_;
  uint64_t prefix_hits_seen_ = 0;
  // The host tier: counters brought up to the engine's totals.
  struct TierCounter {
    prometheus::Counter* counter = nullptr;
    uint64_t seen = 0;
    void Advance(uint64_t total);
  };
  TierCounter tier_spilled_;
  TierCounter tier_hits_;
  TierCounter tier_promoted_;
  TierCounter tier_evicted_;
  prometheus::Gauge* tier_pages_ = nullptr;
  prometheus::Gauge* queue_waiting_;
  prometheus::Gauge* running_;
  prometheus::Gauge* transferring_;
  prometheus::Counter* tokens_;
  prometheus::Family<prometheus::Counter>* violations_;
  uint64_t tokens_seen_ = 0;
  prometheus::Family<prometheus::Counter>* kv_refused_;
  prometheus::Gauge* kv_unauthenticated_;
  prometheus::Gauge* kv_idle_sessions_;
  absl::Mutex connections_mu_;
  prometheus::Counter* connections_opened_;
  prometheus::Counter* connections_reused_;
  uint64_t connections_opened_seen_ ABSL_GUARDED_BY(connections_mu_) = 0;
  uint64_t connections_reused_seen_ ABSL_GUARDED_BY(connections_mu_) = 0;
  absl::Mutex kv_events_mu_;
  prometheus::Counter* kv_events_dropped_ ABSL_GUARDED_BY(kv_events_mu_) =
      nullptr;
  uint64_t kv_events_dropped_seen_ ABSL_GUARDED_BY(kv_events_mu_) = 0;
  std::string role_;
  // Registers the host tier's metrics (the constructor's tail).
  void AddTierMetrics(const prometheus::Labels& labels);
  // Registers the KV port's refusal counter and its two gauges.
  void AddKvPortMetrics(const prometheus::Labels& labels);
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_NODE_METRICS_H_
