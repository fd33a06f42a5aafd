// Pieces shared by the three node roles: internal error bodies between nodes
// (which carry the absl status code so it survives the hop), JSON helpers,
// and the HTTP server set-up.
#ifndef KVCANARY_ENGINE_NODES_NODE_COMMON_H_
#define KVCANARY_ENGINE_NODES_NODE_COMMON_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "common/ids.h"
#include "common/tls.h"
#include "engine/model/sampler.h"
#include "engine/transfer/internal_auth.h"
#include "httplib.h"  // httplib::Error: the nodes call each other with its client
#include "nlohmann/json.hpp"

namespace kvcanary::engine {

// {"error": {"message": ..., "code": <absl::StatusCode as int>}}
std::string InternalErrorBody(const absl::Status& status);
// Reads an internal error response back into a Status (unknown shapes:
// kInternal with the HTTP status).
absl::Status StatusFromInternalResponse(int http_status,
                                        const std::string& body);
// Writes `status` as the response: HTTP status by code, internal body, plus
// the fields of `extra` (an object, or null) beside "error".
void RespondInternalError(http::Response& res, const absl::Status& status,
                          const nlohmann::json& extra = nullptr);

// How a node reports what happened to a request at its step, for the
// router's access log: "ok", or "<STATUS_CODE>: <message>" (e.g.
// "DATA_LOSS: page 0 layer 1 failed its CRC32C check"). Messages name
// counts and ids, never prompt or output text.
std::string OutcomeText(const absl::Status& status);

// A call to another node that got no HTTP answer, as kUnavailable naming
// the node and what failed: "decode node http://…: connection refused or
// unreachable", "…: connection lost while reading its answer", …
absl::Status NodeCallError(const char* role, const std::string& url,
                           httplib::Error error);

// Parses a JSON object body strictly (common/json_strict.h: nothing after
// the value, no duplicate key); kInvalidArgument if it is not one.
absl::StatusOr<nlohmann::json> ParseJsonObject(const std::string& body);
// Reads a field with a type check; kInvalidArgument naming it otherwise.
absl::StatusOr<uint64_t> JsonUint(const nlohmann::json& j, const char* field);
absl::StatusOr<double> JsonNumber(const nlohmann::json& j, const char* field,
                                  double default_value);
absl::StatusOr<std::string> JsonString(const nlohmann::json& j,
                                       const char* field);
// A string field of a node's JSON; nullopt if absent or not a string.
std::optional<std::string> OptionalString(const nlohmann::json& j,
                                          const char* field);
absl::StatusOr<std::vector<int>> JsonTokenArray(const nlohmann::json& j,
                                                const char* field);

// What a node's listeners require (docs/nodes.md, "Internal plane").
struct NodeCredentials {
  // Every /internal/ route and the KV port; mandatory (a node refuses to
  // start without it).
  SharedSecret internal;
  // GET /v1/trace; unset: the trace stream is off (403).
  SharedSecret trace;
  // Concurrent GET /v1/trace readers; one more gets 503.
  int max_trace_readers = 8;
  // Mutual TLS between nodes (docs/nodes.md, "Mutual TLS"): the nodes'
  // listeners and the KV port require a certificate from the deployment CA,
  // and every call to another node presents this one. Null: plain TCP.
  std::shared_ptr<const tls::Context> tls;
};

// Another node's address as configured: http://HOST:PORT, or https:// when
// the deployment runs mutual TLS.
struct NodeUrl {
  bool https = false;
  std::string host;  // without brackets
  int port = 0;
};
// kInvalidArgument naming `url` unless it is http(s)://HOST:PORT with
// nothing after the port but an optional '/', or if its scheme does not
// match the deployment (https exactly when `tls` is set).
absl::StatusOr<NodeUrl> ParseNodeUrl(const std::string& url,
                                     const tls::Context* tls);
// An HTTP client for the node at `url` (REQUIRES: ParseNodeUrl accepts it):
// over mutual TLS it presents this node's certificate and accepts only a
// server certificate from the deployment CA that names the URL's host.
std::unique_ptr<httplib::ClientImpl> NodeClient(const std::string& url,
                                                const tls::Context* tls);

// Whether the request carries "Authorization: Bearer <secret>"; if not,
// answers 401 with the internal error body (naming neither the secret nor
// what was sent) and returns false.
bool Authorized(const http::Request& req, const SharedSecret& secret,
                const char* what, http::Response& res);

// Serves GET /metrics (`text()`, the Prometheus text format): on `main`, or,
// with `port` >= 0, on a listener of its own at host:port (0: any free
// port), with a GET /health beside it, so a scraper can reach the metrics
// without reaching the node's API. Beside `text()` it serves `main`'s
// connection cap metrics (engine/nodes/http_listener_metrics.h), labelled
// with `role`. Returns that listener's port, or -1 when the metrics are on
// `main`. *separate holds the listener.
absl::StatusOr<int> ServeMetrics(http::Server* main, const std::string& role,
                                 const std::string& host, int port,
                                 std::function<std::string()> text,
                                 std::unique_ptr<http::Server>* separate);

// The routes every engine node serves: GET /internal/v1/limits (the node's
// NodeSettings, engine/node_settings.h; internal secret), /v1/trace (trace
// token, capped readers), /health and /metrics (open: no request or tenant
// identifiers beyond the configured tenant ids; /metrics through
// ServeMetrics); and the server's expect-continue check: a request for an
// /internal/ route with "Expect: 100-continue" gets its 100 only with the
// internal secret, a 401 otherwise. `loop`, `metrics`, `trace`
// and `creds` must outlive the server.
class EngineLoop;
class NodeMetrics;
class TraceBus;
struct EngineOptions;
void AddEngineNodeRoutes(http::Server* server, const std::string& role,
                         int max_prompt_tokens, const EngineLoop* loop,
                         NodeMetrics* metrics, TraceBus* trace,
                         const NodeCredentials* creds);

// `options` with its trace bus set.
EngineOptions WithTrace(EngineOptions options, TraceBus* trace);

// The fields every internal request carries: who, what, how to sample.
struct NodeRequest {
  RequestId id;
  TenantId tenant;
  std::vector<int> prompt;
  SamplingParams sampling;  // max_tokens from the body, or 1 if absent
  std::string cache_salt;   // "" if absent
};
// request_id (non-zero, not kReservedRequestId) and tenant_id (non-zero),
// prompt, temperature, top_p, seed (optional), max_tokens (optional),
// cache_salt (optional; IsValidCacheSalt), logprobs (optional, [0,
// kMaxTopLogprobs]), prompt_logprobs (optional boolean);
// kInvalidArgument (HTTP 400) naming the field.
absl::StatusOr<NodeRequest> ParseNodeRequest(const nlohmann::json& body);

// The largest request body any listener accepts (router and nodes): 1 MiB,
// far above the longest prompt a context holds; a larger one is a 413 with
// an OpenAI-shaped error, refused before it is read into memory.
inline constexpr size_t kMaxRequestBodyBytes = size_t{1} << 20;

// A server running up to `threads` handlers at once (each streaming
// response holds one while it lasts), refusing bodies over
// kMaxRequestBodyBytes, whose own errors (400, 404, 405, 408, 413, 431, 503,
// 500) carry the OpenAI error shape.
// With `tls`, the listener requires mutual TLS (http::Options::tls).
// `max_unoccupied_per_address`: http::Options' (the share of idle or
// pending connections one address keeps at the connection cap).
std::unique_ptr<http::Server> MakeHttpServer(
    int threads, std::shared_ptr<const tls::Context> tls = nullptr,
    int max_unoccupied_per_address =
        http::Options().max_unoccupied_per_address);
// Binds host:port (0 = any free port) and serves on the server's own
// threads. Returns the bound port.
absl::StatusOr<int> BindAndServe(http::Server* server, const std::string& host,
                                 int port);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_NODE_COMMON_H_
