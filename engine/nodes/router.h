// The router: the OpenAI-compatible front door. Authenticates (API key ->
// tenant), tokenizes, admits (length limits checked here, once, against the
// smallest limit of the prefill and decode nodes -> 400), picks a prefill and
// a decode node (round robin), and relays the decode node's tokens to the
// client as JSON or SSE.
//
// Public HTTP API (docs/api.md): POST /v1/completions, POST
// /v1/chat/completions, GET /v1/models, GET /version, GET /health, GET
// /metrics; every answer carries "Server: kvcanary/<version>". Every
// completion response from the moment a request id is assigned (after
// authentication, parsing and admission) carries it in kRequestIdHeader.
// With an access log, every completion request ends in one line of it
// (engine/access_log.h).
//
// Thread-safe; owns its threads.
#ifndef KVCANARY_ENGINE_NODES_ROUTER_H_
#define KVCANARY_ENGINE_NODES_ROUTER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/http_server.h"
#include "engine/core/faults.h"
#include "engine/model/tokenizer.h"
#include "engine/nodes/access_log.h"
#include "engine/nodes/hangup_watch.h"
#include "engine/nodes/node_health.h"
#include "engine/nodes/node_metrics.h"
#include "engine/nodes/node_pool.h"
#include "engine/nodes/node_settings.h"
#include "engine/nodes/openai_request.h"
#include "engine/nodes/openai_responses.h"
#include "engine/nodes/request_ids.h"
#include "engine/nodes/tenants.h"
#include "engine/nodes/token_relay.h"
#include "engine/transfer/internal_auth.h"

namespace kvcanary::engine {

class DecodeStream;

struct RouterOptions {
  int metrics_port = -1;  // /metrics on its own listener (0: any); -1: not
  std::string host = "127.0.0.1";
  int http_port = 0;
  std::vector<std::string> prefill_urls;  // http://host:port
  std::vector<std::string> decode_urls;
  // Sent to the nodes on every internal call; mandatory.
  SharedSecret internal_secret;
  // The admin token (--trace-token-file; up passes the nodes' one): GET
  // /health shows the nodes' URLs and up's PIDs only to it. Unset: never.
  SharedSecret admin_token;
  // Mutual TLS to the nodes (their URLs are then https://); null: plain.
  // The router's own listener stays plain HTTP (put TLS for clients in
  // front of it).
  std::shared_ptr<const tls::Context> tls;
  // The one model /v1/models lists and a request's "model" may name
  // (serve: --served-model-name).
  std::string model_name = "kvcanary-synthetic";
  int http_threads = 96;
  // The HTTP listener's share of unoccupied connections per address
  // (http::Options::max_unoccupied_per_address).
  int http_max_unoccupied_per_address = 32;
  int max_in_flight = 256;  // beyond: 429
  absl::Duration node_timeout = absl::Seconds(60);
  // Idle keep-alive connections kept per decode node (NodePool); 0: a new
  // connection for every request.
  int node_pool_idle = 32;
  // --tenant-header: on a request whose key belongs to a gateway tenant,
  // the header naming the tenant it is for (docs/api.md, "Gateways");
  // "": none (gateway tenants' keys are tenants of their own).
  std::string tenant_header;
  // --chat-template: how /v1/chat/completions messages become the prompt.
  ChatTemplate chat_template = ChatTemplate::kPlain;
  absl::Duration startup_timeout = absl::Seconds(20);
  FaultSet faults;
  AccessLogOptions access_log;  // path "": no access log
  std::string up_status_file;   // "": not run by up (engine/node_health.h)
};

class Router {
 public:
  // `tokenizer` and `tenants` must outlive the router.
  Router(const Tokenizer* tokenizer, const TenantRegistry* tenants,
         const RouterOptions& options);
  ~Router();

  // Opens the access log if one is set, reads every node's settings
  // (waiting up to startup_timeout for them), then serves.
  absl::Status Start();
  void Stop();
  int http_port() const { return http_port_; }
  int metrics_port() const { return metrics_port_; }  // -1: on http_port
  int max_prompt_tokens() const { return settings_.max_prompt_tokens; }
  int context_tokens() const { return settings_.context_tokens; }

 private:
  // The router's life and its completion handler (router.cc).
  void HandleCompletion(const http::Request& req, http::Response& res,
                        bool chat);
  // Answers `status` as an OpenAI error and logs the request.
  void Fail(const absl::Status& status, http::Response& res,
            AccessRecord* record);
  // `status` as a client sees it: no node address in its message
  // (NodeHealth::Redacted).
  absl::Status ForClient(const absl::Status& status) const;
  // Finishes `record` (total_ms) and appends it to the access log, if any.
  void Log(AccessRecord* record);
  // Reads every node's GET /internal/v1/limits into settings_.
  absl::Status FetchSettings();

  // The info endpoints (router_info.cc): GET /v1/models and GET /version
  // to a tenant's key, and GET /health, on server_.
  void AddInfoRoutes();
  // GET /health: up or not per role; with the admin token, the nodes'
  // URLs and up's PIDs too (docs/api.md, "Health").
  void Health(const http::Request& req, http::Response& res) const;

  // Authentication and admission (router_admission.cc).
  //
  // An admitted request (router_admission.h).
  struct Admitted;
  // The tenant whose API key the request carries; kUnauthenticated for a
  // missing or unknown key. The one key check: of the handlers, and of the
  // expect-continue check, before the body is read (docs/api.md).
  absl::StatusOr<const Tenant*> CheckKey(const http::Request& req) const;
  // Answers "Expect: 100-continue": the key first (every route but the
  // open /health and /metrics); false with the 401 in `res` if it is bad
  // (counted as a completion request's 401 would be; not access-logged:
  // this runs on an I/O thread).
  bool ExpectContinue(const http::Request& req, http::Response& res);
  // The tenant the request is for: its key's, or, for a gateway's key with
  // --tenant-header, the one the header names.
  absl::StatusOr<const Tenant*> RequestTenant(const http::Request& req,
                                              AccessRecord* record) const;
  // Authentication, parsing, tokenizing and admission (length limits and
  // in-flight counts), filling `record` as it learns; the request's error
  // otherwise.
  absl::StatusOr<std::shared_ptr<Admitted>> Admit(const http::Request& req,
                                                  bool chat,
                                                  AccessRecord* record);

  // The relay to the decode nodes and back to the client
  // (router_relay.cc).
  //
  // What the decode node is asked for choice `choice` of an admitted
  // request.
  std::string DecodeRequestBody(const Admitted& admitted, int choice) const;
  // The answer's fields known before the first token.
  CompletionResult NewResult(const Admitted& admitted) const;
  // Starts choice `choice`'s stream on a decode node that is up
  // (kUnavailable naming the role when none is).
  absl::StatusOr<std::shared_ptr<DecodeStream>> StartDecode(
      const Admitted& admitted, int choice);
  // Waits for a started stream's headers, giving the request up if
  // `client_gone` says the client hung up meanwhile; false when the request
  // was answered here (failed) or abandoned, logged either way.
  bool AwaitDecode(DecodeStream& stream, http::Response& res,
                   AccessRecord* record,
                   const std::function<bool()>& client_gone);
  // Every choice's stream, started and answered (choice 0 first, so the
  // others find its prompt in the prefix cache), each behind its relay;
  // empty when the request was answered here or abandoned (the streams
  // started are cancelled).
  std::vector<std::shared_ptr<TokenRelay>> OpenChoices(
      const Admitted& admitted, http::Response& res,
      const std::shared_ptr<AccessRecord>& record,
      const std::function<bool()>& client_gone);
  // Relays the decode nodes' answers to the client, JSON or SSE.
  // `client_gone`: whether the client hung up (polled until the decode
  // nodes answer; the request is then given up, the decode node told by
  // the connection it was waiting on).
  void Relay(std::shared_ptr<Admitted> admitted, http::Response& res,
             std::shared_ptr<AccessRecord> record,
             const std::function<bool()>& client_gone);
  struct StreamState;
  // The SSE answer: the choices' chunks as they come (round robin), each
  // choice's final chunk, the usage and [DONE].
  void RelayStream(std::shared_ptr<Admitted> admitted,
                   std::vector<std::shared_ptr<TokenRelay>> relays,
                   std::vector<CompletionResult> results, http::Response& res,
                   std::shared_ptr<AccessRecord> record);
  // One call of the stream's provider: the next chunk, or the end.
  bool StreamNext(StreamState& state, AccessRecord& record,
                  http::DataSink& sink);

  const Tokenizer* tokenizer_;
  const TenantRegistry* tenants_;
  RouterOptions options_;
  NodeMetrics metrics_;
  std::unique_ptr<http::Server> metrics_server_;
  int metrics_port_ = -1;
  std::unique_ptr<AccessLog> access_log_;  // null: none
  std::unique_ptr<http::Server> server_;
  int http_port_ = 0;
  ServingSettings settings_;  // from the nodes, at Start()
  RequestIdSequence request_ids_;
  std::unique_ptr<NodeHealth> health_;  // from Start()
  // Keep-alive connections to the decode nodes.
  std::unique_ptr<NodePool> pool_;
  std::atomic<uint64_t> next_node_{0};
  HangupWatch hangups_;  // clients that give up before their first token
  std::atomic<int> in_flight_{0};
  // Requests in flight per tenant, indexed by TenantId (1..N).
  std::unique_ptr<std::atomic<int>[]> tenant_in_flight_;
  int64_t created_ = 0;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_ROUTER_H_
