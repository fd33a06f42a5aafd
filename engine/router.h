// The router: the OpenAI-compatible front door. Authenticates (API key ->
// tenant), tokenizes, admits (length limits checked here, once, against the
// smallest limit of the prefill and decode nodes -> 400), picks a prefill and
// a decode node (round robin), and relays the decode node's tokens to the
// client as JSON or SSE.
//
// Public HTTP API (docs/api.md): POST /v1/completions, POST
// /v1/chat/completions, GET /v1/models, GET /health, GET /metrics. Every
// completion response from the moment a request id is assigned (after
// authentication, parsing and admission) carries it in kRequestIdHeader.
//
// Thread-safe; owns its threads.
#ifndef KVCANARY_ENGINE_ROUTER_H_
#define KVCANARY_ENGINE_ROUTER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "engine/faults.h"
#include "engine/node_metrics.h"
#include "engine/tenants.h"
#include "engine/tokenizer.h"
#include "httplib.h"

namespace kvcanary::engine {

struct RouterOptions {
  std::string host = "127.0.0.1";
  int http_port = 0;
  std::vector<std::string> prefill_urls;  // http://host:port
  std::vector<std::string> decode_urls;
  std::string model_name = "kvcanary";
  int http_threads = 96;
  int max_in_flight = 256;  // beyond: 429
  absl::Duration node_timeout = absl::Seconds(60);
  absl::Duration startup_timeout = absl::Seconds(20);
  FaultSet faults;
};

class Router {
 public:
  // `tokenizer` and `tenants` must outlive the router.
  Router(const Tokenizer* tokenizer, const TenantRegistry* tenants,
         const RouterOptions& options);
  ~Router();

  // Reads every node's limits (waiting up to startup_timeout for them),
  // then serves.
  absl::Status Start();
  void Stop();
  int http_port() const { return http_port_; }
  int max_prompt_tokens() const { return max_prompt_tokens_; }
  int context_tokens() const { return context_tokens_; }

 private:
  void HandleCompletion(const httplib::Request& req, httplib::Response& res,
                        bool chat);
  absl::Status FetchLimits();

  const Tokenizer* tokenizer_;
  const TenantRegistry* tenants_;
  RouterOptions options_;
  NodeMetrics metrics_;
  std::unique_ptr<httplib::Server> server_;
  std::thread server_thread_;
  int http_port_ = 0;
  int decode_max_prompt_tokens_ = 0;  // smallest over the decode nodes
  int max_prompt_tokens_ = 0;         // smallest over the nodes
  int context_tokens_ = 0;            // smallest over the nodes
  std::atomic<uint64_t> next_request_{1};
  std::atomic<uint64_t> next_node_{0};
  std::atomic<int> in_flight_{0};
  // Requests in flight per tenant, indexed by TenantId (1..N).
  std::unique_ptr<std::atomic<int>[]> tenant_in_flight_;
  int64_t created_ = 0;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_ROUTER_H_
