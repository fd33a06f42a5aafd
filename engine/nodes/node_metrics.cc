#include "engine/nodes/node_metrics.h"

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/text_serializer.h"

namespace kvcanary::engine {
namespace {
// Serializes the gauges' refresh and their serialization across nodes.
ABSL_CONST_INIT absl::Mutex serialize_mu(absl::kConstInit);
}  // namespace

NodeMetrics::NodeMetrics(const std::string& role)
    : registry_(std::make_shared<prometheus::Registry>()), role_(role) {
  const prometheus::Labels labels{{"role", role}};
  requests_ = &prometheus::BuildCounter()
                   .Name("kvcanary_node_requests_total")
                   .Help("Requests finished, by outcome")
                   .Labels(labels)
                   .Register(*registry_);
  auto& transfer = prometheus::BuildCounter()
                       .Name("kvcanary_node_transfer_bytes_total")
                       .Help("KV bytes moved prefill -> decode")
                       .Labels(labels)
                       .Register(*registry_);
  transfer_bytes_ = &transfer.Add({});
  auto& transfers = prometheus::BuildCounter()
                        .Name("kvcanary_node_transfers_total")
                        .Help("KV transfers, by outcome")
                        .Labels(labels)
                        .Register(*registry_);
  transfers_ok_ = &transfers.Add({{"outcome", "ok"}});
  transfer_failures_ = &transfers.Add({{"outcome", "failed"}});
  auto& pages = prometheus::BuildGauge()
                    .Name("kvcanary_node_kv_pages")
                    .Help("KV pages by state")
                    .Labels(labels)
                    .Register(*registry_);
  pages_used_ = &pages.Add({{"state", "used"}});
  pages_free_ = &pages.Add({{"state", "free"}});
  pages_cached_ = &pages.Add({{"state", "cached"}});
  prefix_hits_ = &prometheus::BuildCounter()
                      .Name("kvcanary_node_prefix_cache_hit_pages_total")
                      .Help("KV pages served from the prefix cache")
                      .Labels(labels)
                      .Register(*registry_)
                      .Add({});
  auto& queue = prometheus::BuildGauge()
                    .Name("kvcanary_node_requests_in_flight")
                    .Help("Requests by engine phase")
                    .Labels(labels)
                    .Register(*registry_);
  queue_waiting_ = &queue.Add({{"phase", "waiting"}});
  running_ = &queue.Add({{"phase", "running"}});
  transferring_ = &queue.Add({{"phase", "transferring"}});
  violations_ =
      &prometheus::BuildCounter()
           .Name("kvcanary_node_watermark_violations_total")
           .Help("Watermark violations found by the attention kernel, by kind")
           .Labels(labels)
           .Register(*registry_);
  tokens_ = &prometheus::BuildCounter()
                 .Name("kvcanary_node_generated_tokens_total")
                 .Help("Tokens generated (rate() gives tokens/s)")
                 .Labels(labels)
                 .Register(*registry_)
                 .Add({});
  AddKvPortMetrics(labels);
  auto& connections =
      prometheus::BuildCounter()
          .Name("kvcanary_node_connections_total")
          .Help(
              "Connections to the decode nodes: opened, or reused from a "
              "pool of idle ones (router: for requests; prefill: KV "
              "sessions for transfers)")
          .Labels(labels)
          .Register(*registry_);
  connections_opened_ = &connections.Add({{"how", "opened"}});
  connections_reused_ = &connections.Add({{"how", "reused"}});
  AddTierMetrics(labels);
}

void NodeMetrics::AddTierMetrics(const prometheus::Labels& labels) {
  auto counter = [&](const char* name, const char* help) {
    return &prometheus::BuildCounter()
                .Name(name)
                .Help(help)
                .Labels(labels)
                .Register(*registry_)
                .Add({});
  };
  tier_spilled_.counter =
      counter("kvcanary_node_prefix_cache_spilled_pages_total",
              "Prefix pages evicted from the page pool into the host tier");
  tier_hits_.counter =
      counter("kvcanary_node_prefix_cache_tier_hit_pages_total",
              "Prefix pages the pool lacked that the host tier held");
  tier_promoted_.counter =
      counter("kvcanary_node_prefix_cache_promoted_pages_total",
              "Prefix pages copied back from the host tier into the pool");
  tier_evicted_.counter =
      counter("kvcanary_node_prefix_cache_tier_evicted_pages_total",
              "Pages evicted from the host tier (least recently used)");
  tier_pages_ = &prometheus::BuildGauge()
                     .Name("kvcanary_node_prefix_cache_tier_pages")
                     .Help("Pages held by the host tier")
                     .Labels(labels)
                     .Register(*registry_)
                     .Add({});
}

void NodeMetrics::TierCounter::Advance(uint64_t total) {
  if (total <= seen) return;
  counter->Increment(static_cast<double>(total - seen));
  seen = total;
}

void NodeMetrics::AddKvEventsMetrics() {
  absl::MutexLock lock(&kv_events_mu_);
  if (kv_events_dropped_ != nullptr) return;
  kv_events_dropped_ =
      &prometheus::BuildCounter()
           .Name("kvcanary_engine_kv_events_dropped_total")
           .Help(
               "KV cache events dropped because the publisher's queue was "
               "full")
           .Labels({{"role", role_}})
           .Register(*registry_)
           .Add({});
}

void NodeMetrics::SetKvEventsDropped(uint64_t total) {
  absl::MutexLock lock(&kv_events_mu_);
  if (kv_events_dropped_ == nullptr || total <= kv_events_dropped_seen_) {
    return;
  }
  kv_events_dropped_->Increment(
      static_cast<double>(total - kv_events_dropped_seen_));
  kv_events_dropped_seen_ = total;
}

void NodeMetrics::SetNodeConnections(uint64_t opened, uint64_t reused) {
  absl::MutexLock lock(&connections_mu_);
  if (opened > connections_opened_seen_) {
    connections_opened_->Increment(
        static_cast<double>(opened - connections_opened_seen_));
    connections_opened_seen_ = opened;
  }
  if (reused > connections_reused_seen_) {
    connections_reused_->Increment(
        static_cast<double>(reused - connections_reused_seen_));
    connections_reused_seen_ = reused;
  }
}

void NodeMetrics::AddKvPortMetrics(const prometheus::Labels& labels) {
  kv_refused_ = &prometheus::BuildCounter()
                     .Name("kvcanary_node_kv_connections_refused_total")
                     .Help(
                         "KV connections refused before touching a "
                         "reservation, by reason")
                     .Labels(labels)
                     .Register(*registry_);
  kv_unauthenticated_ =
      &prometheus::BuildGauge()
           .Name("kvcanary_node_kv_unauthenticated_connections")
           .Help("KV connections accepted that have not authenticated yet")
           .Labels(labels)
           .Register(*registry_)
           .Add({});
  kv_idle_sessions_ =
      &prometheus::BuildGauge()
           .Name("kvcanary_node_kv_idle_sessions")
           .Help("Authenticated KV sessions waiting for their next transfer")
           .Labels(labels)
           .Register(*registry_)
           .Add({});
}

void NodeMetrics::CountKvRefused(const char* reason) {
  kv_refused_->Add({{"reason", reason}}).Increment();
}

void NodeMetrics::SetKvPort(int unauthenticated, int idle_sessions) {
  kv_unauthenticated_->Set(unauthenticated);
  kv_idle_sessions_->Set(idle_sessions);
}

void NodeMetrics::CountViolations(
    const std::vector<WatermarkViolation>& violations) {
  for (const WatermarkViolation& v : violations) {
    // Writer tenant ids come from the tenants file: a bounded label.
    violations_
        ->Add({{"kind", ViolationKindName(v.kind)},
               {"writer_tenant", std::to_string(v.writer.tenant.value())}})
        .Increment();
  }
}

void NodeMetrics::CountRequest(const absl::Status& status) {
  const std::string outcome = status.ok() ? "ok"
                              : absl::IsCancelled(status)
                                  ? "cancelled"
                                  : absl::StatusCodeToString(status.code());
  requests_->Add({{"outcome", outcome}}).Increment();
}

void NodeMetrics::CountTransfer(uint64_t bytes, const absl::Status& status) {
  transfer_bytes_->Increment(static_cast<double>(bytes));
  (status.ok() ? transfers_ok_ : transfer_failures_)->Increment();
}

std::string NodeMetrics::Serialize(const EngineLoop* loop) {
  absl::MutexLock lock(&serialize_mu);
  if (loop != nullptr) {
    const EngineLoopStats s = loop->stats();
    pages_used_->Set(s.pages_used);
    pages_free_->Set(s.pages_free);
    pages_cached_->Set(s.pages_cached);
    if (s.prefix_hit_pages > prefix_hits_seen_) {
      prefix_hits_->Increment(
          static_cast<double>(s.prefix_hit_pages - prefix_hits_seen_));
      prefix_hits_seen_ = s.prefix_hit_pages;
    }
    tier_spilled_.Advance(s.tier_spilled_pages);
    tier_hits_.Advance(s.tier_hit_pages);
    tier_promoted_.Advance(s.tier_promoted_pages);
    tier_evicted_.Advance(s.tier_evicted_pages);
    tier_pages_->Set(s.tier_pages);
    queue_waiting_->Set(s.waiting);
    running_->Set(s.running);
    transferring_->Set(s.transferring);
    if (s.tokens_generated > tokens_seen_) {
      tokens_->Increment(
          static_cast<double>(s.tokens_generated - tokens_seen_));
      tokens_seen_ = s.tokens_generated;
    }
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace kvcanary::engine
