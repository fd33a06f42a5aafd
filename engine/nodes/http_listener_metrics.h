// What an HTTP listener's connection cap has done (common/http_server.h,
// Options::max_connections and max_pending_per_address), as Prometheus
// metrics on the same /metrics as the role's own (docs/nodes.md, "HTTP
// listeners"):
//
//   kvcanary_http_connections{role,state="open"|"pending"}
//   kvcanary_http_connections_refused_total{role,reason="connection cap"|
//                                           "address over its share"}
//   kvcanary_http_connections_closed_for_room_total{role,waited=
//                                           "next request"|"first request"}
//
// Thread-safe.
#ifndef KVCANARY_ENGINE_NODES_HTTP_LISTENER_METRICS_H_
#define KVCANARY_ENGINE_NODES_HTTP_LISTENER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/http_server.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace kvcanary::engine {

class HttpListenerMetrics {
 public:
  // `server` must outlive this.
  HttpListenerMetrics(const http::Server* server, const std::string& role);

  // The metrics as of now, in the Prometheus text format.
  std::string Text();

 private:
  // A counter brought up to a total read from the server.
  struct Total {
    prometheus::Counter* counter = nullptr;
    uint64_t seen = 0;
    void Advance(uint64_t total);
  };

  const http::Server* server_;
  std::shared_ptr<prometheus::Registry> registry_;
  absl::Mutex mu_;
  prometheus::Gauge* open_ ABSL_GUARDED_BY(mu_);
  prometheus::Gauge* pending_ ABSL_GUARDED_BY(mu_);
  Total refused_cap_ ABSL_GUARDED_BY(mu_);
  Total refused_address_ ABSL_GUARDED_BY(mu_);
  Total evicted_idle_ ABSL_GUARDED_BY(mu_);
  Total evicted_pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_HTTP_LISTENER_METRICS_H_
