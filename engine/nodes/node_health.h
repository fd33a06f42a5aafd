// The router's view of its nodes: each node's GET /health is probed every
// probe_interval, so while no node of a role answers, requests are refused
// at once with 503 naming the role (rather than waiting on a dead address),
// and served again as soon as one answers, without a router restart. Under
// `kvcanary-engine up` it also serves what up reports of its children (the
// status file, engine/supervisor_status.h): state, pid and restarts of each
// role, in GET /health (to the admin token) and as
// kvcanary_engine_restarts_total (docs/nodes.md).
//
// A node is down when a probe cannot connect or gets a non-200 answer, or
// after three probes in a row time out; up again at its first good probe.
//
// Thread-safe; owns its probing thread.
#ifndef KVCANARY_ENGINE_NODES_NODE_HEALTH_H_
#define KVCANARY_ENGINE_NODES_NODE_HEALTH_H_

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace kvcanary::engine {

struct NodeHealthOptions {
  std::vector<std::string> prefill_urls;  // http://host:port
  std::vector<std::string> decode_urls;
  std::string up_status_file;               // "": not run by up
  std::shared_ptr<const tls::Context> tls;  // the nodes' mutual TLS, or null
  absl::Duration probe_interval = absl::Milliseconds(200);
};

class NodeHealth {
 public:
  explicit NodeHealth(NodeHealthOptions options);
  ~NodeHealth();  // Stop()
  NodeHealth(const NodeHealth&) = delete;
  NodeHealth& operator=(const NodeHealth&) = delete;

  // Starts probing. Every node counts as up until a probe says otherwise.
  void Start();
  void Stop();

  // What one probe of a node's /health found.
  enum class Probed { kUp, kDown, kTimedOut };

  struct Route {
    std::string prefill_url;
    std::string decode_url;
  };
  // The nodes for the `n`th request: round robin, skipping nodes that are
  // down; kUnavailable naming the role and how many of its nodes are down
  // (never their addresses: the answer goes to any tenant) if all of a
  // role's are down.
  // A role with no node up is probed again first, so a node that just came
  // back is served at once.
  absl::StatusOr<Route> Pick(uint64_t n);

  // `status` as a client may see it: the same code and payloads, its
  // message with every node URL replaced by "<role>-<index>" ("decode-0",
  // the index within the role, as in /health and /metrics) and any
  // other host:port of the nodes' hosts (a KV port) by "an internal
  // address". Errors of the nodes' calls name the addresses they called;
  // an answer goes to any tenant, and the addresses map the deployment.
  absl::Status Redacted(const absl::Status& status) const;

  // GET /health's body (docs/api.md): {"status": "ok" | "degraded",
  // "role": "router", "roles": {"prefill": "up" | "down", "decode": ...}};
  // `detailed` (the admin token's view) adds "nodes" (each one's role,
  // its index within the role, URL and state) and, under up, "supervisor"
  // (its children's PIDs and restarts).
  std::string HealthJson(bool detailed) const;
  // kvcanary_router_node_up{role, node} (node: the index within the role,
  // never an address: /metrics is open), and kvcanary_engine_restarts_total
  // under up, in the Prometheus text format.
  std::string MetricsText();

 private:
  struct Node {
    std::string role;  // prefill or decode
    int index = 0;     // within its role, in the order configured
    std::string url;
    bool up = true;
    int timeouts = 0;  // probes in a row that timed out
    absl::Time down_since;
    prometheus::Gauge* up_gauge = nullptr;
  };
  void ProbeLoop();
  void Update(size_t index, Probed probed);
  absl::StatusOr<std::string> PickOf(const std::string& role, uint64_t n) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const NodeHealthOptions options_;
  std::vector<std::string> roles_, urls_;  // of nodes_[i]; fixed at start
  mutable absl::Mutex mu_;
  std::vector<Node> nodes_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread prober_;

  absl::Mutex metrics_mu_;  // serializes MetricsText()
  std::shared_ptr<prometheus::Registry> registry_;
  std::map<std::string, prometheus::Counter*> restarts_
      ABSL_GUARDED_BY(metrics_mu_);  // by role
  std::map<std::string, int64_t> restarts_seen_
      ABSL_GUARDED_BY(metrics_mu_);  // by role
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_NODE_HEALTH_H_
