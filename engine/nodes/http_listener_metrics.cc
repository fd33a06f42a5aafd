#include "engine/nodes/http_listener_metrics.h"

#include "common/check.h"
#include "prometheus/text_serializer.h"

namespace kvcanary::engine {

void HttpListenerMetrics::Total::Advance(uint64_t total) {
  if (total <= seen) return;
  counter->Increment(static_cast<double>(total - seen));
  seen = total;
}

HttpListenerMetrics::HttpListenerMetrics(const http::Server* server,
                                         const std::string& role)
    : server_(server), registry_(std::make_shared<prometheus::Registry>()) {
  CHECK(server_ != nullptr);
  const prometheus::Labels labels{{"role", role}};
  auto& connections = prometheus::BuildGauge()
                          .Name("kvcanary_http_connections")
                          .Help(
                              "Connections open on the HTTP listener, and of "
                              "them those without a complete request yet")
                          .Labels(labels)
                          .Register(*registry_);
  auto& refused = prometheus::BuildCounter()
                      .Name("kvcanary_http_connections_refused_total")
                      .Help(
                          "Connections answered 503 at accept: at the cap "
                          "with no room to make, or from an address over "
                          "its share of pending connections")
                      .Labels(labels)
                      .Register(*registry_);
  auto& evicted = prometheus::BuildCounter()
                      .Name("kvcanary_http_connections_closed_for_room_total")
                      .Help(
                          "Connections closed at the cap to make room for a "
                          "new one, by what they were waiting for")
                      .Labels(labels)
                      .Register(*registry_);
  absl::MutexLock lock(&mu_);
  open_ = &connections.Add({{"state", "open"}});
  pending_ = &connections.Add({{"state", "pending"}});
  refused_cap_.counter = &refused.Add({{"reason", "connection cap"}});
  refused_address_.counter =
      &refused.Add({{"reason", "address over its share"}});
  evicted_idle_.counter = &evicted.Add({{"waited", "next request"}});
  evicted_pending_.counter = &evicted.Add({{"waited", "first request"}});
}

std::string HttpListenerMetrics::Text() {
  const http::ConnectionStats s = server_->connection_stats();
  absl::MutexLock lock(&mu_);
  open_->Set(s.open);
  pending_->Set(s.pending);
  refused_cap_.Advance(s.refused_cap);
  refused_address_.Advance(s.refused_address);
  evicted_idle_.Advance(s.evicted_idle);
  evicted_pending_.Advance(s.evicted_pending);
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace kvcanary::engine
