// The router's life and its completion handler: construction, the nodes'
// settings read at start, the routes served, and each completion request
// admitted (router_admission.cc) then relayed (router_relay.cc) or failed,
// and access-logged. The info endpoints are router_info.cc's.
#include "engine/nodes/router.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "engine/nodes/node_common.h"
#include "engine/nodes/openai_errors.h"
#include "engine/nodes/openai_responses.h"
#include "engine/nodes/router_admission.h"
#include "engine/nodes/version.h"
#include "httplib.h"  // the client to the nodes

namespace kvcanary::engine {

Router::Router(const Tokenizer* tokenizer, const TenantRegistry* tenants,
               const RouterOptions& options)
    : tokenizer_(tokenizer),
      tenants_(tenants),
      options_(options),
      metrics_("router"),
      pool_(std::make_unique<NodePool>(
          NodePoolOptions{options.tls.get(), options.node_pool_idle,
                          NodePoolOptions().max_idle_time,
                          options.faults.has(Fault::kCancelReuseChannel)})),
      tenant_in_flight_(new std::atomic<int>[tenants->tenants().size() + 1]()) {
  created_ = absl::ToUnixSeconds(absl::Now());
}

Router::~Router() { Stop(); }

absl::Status Router::FetchSettings() {
  if (!options_.internal_secret.set()) {
    return absl::FailedPreconditionError(
        "the router needs the internal secret (--internal_secret_file)");
  }
  if (options_.prefill_urls.empty() || options_.decode_urls.empty()) {
    return absl::InvalidArgumentError(
        "the router needs at least one prefill and one decode node");
  }
  for (const auto* urls : {&options_.prefill_urls, &options_.decode_urls}) {
    for (const std::string& url : *urls) {
      RETURN_IF_ERROR(ParseNodeUrl(url, options_.tls.get()).status());
    }
  }
  const absl::Time deadline = absl::Now() + options_.startup_timeout;
  auto fetch = [&](const std::string& url) -> absl::StatusOr<NodeSettings> {
    while (true) {
      std::unique_ptr<httplib::ClientImpl> client =
          NodeClient(url, options_.tls.get());
      client->set_connection_timeout(1, 0);
      auto res = client->Get(
          "/internal/v1/limits",
          {{"Authorization", options_.internal_secret.AuthorizationHeader()}});
      if (res && res->status == 401) {
        return absl::UnauthenticatedError(absl::StrCat(
            "node ", url, " refused this router's internal secret"));
      }
      if (res && res->status == 200) {
        auto s = NodeSettings::FromJson(
            nlohmann::json::parse(res->body, nullptr, false));
        if (!s.ok()) {
          return absl::DataLossError(
              absl::StrCat("node ", url, " sent malformed limits"));
        }
        return s;
      }
      if (absl::Now() > deadline) {
        return absl::UnavailableError(
            absl::StrCat("node ", url, " did not answer"));
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  };
  std::vector<NodeSettings> prefill, decode;
  for (const std::string& url : options_.prefill_urls) {
    auto s = fetch(url);
    if (!s.ok()) return s.status();
    prefill.push_back(*s);
  }
  for (const std::string& url : options_.decode_urls) {
    auto s = fetch(url);
    if (!s.ok()) return s.status();
    decode.push_back(*s);
  }
  settings_ = CombineNodeSettings(prefill, decode);
  return absl::OkStatus();
}

absl::Status Router::Start() {
  if (!options_.access_log.path.empty()) {
    auto log = AccessLog::Open(options_.access_log);
    if (!log.ok()) return log.status();
    access_log_ = *std::move(log);
  }
  absl::Status fetched = FetchSettings();
  if (!fetched.ok()) return fetched;
  health_ = std::make_unique<NodeHealth>(
      NodeHealthOptions{options_.prefill_urls, options_.decode_urls,
                        options_.up_status_file, options_.tls});
  health_->Start();
  server_ = MakeHttpServer(options_.http_threads, nullptr,
                           options_.http_max_unoccupied_per_address);
  server_->set_default_headers(
      {{"Server", absl::StrCat(kEngineName, "/", kEngineVersion)}});
  server_->Post("/v1/completions",
                [this](const http::Request& req, http::Response& res) {
                  HandleCompletion(req, res, /*chat=*/false);
                });
  server_->Post("/v1/chat/completions",
                [this](const http::Request& req, http::Response& res) {
                  HandleCompletion(req, res, /*chat=*/true);
                });
  server_->set_expect_continue_handler(
      [this](const http::Request& req, http::Response& res) {
        return ExpectContinue(req, res);
      });
  AddInfoRoutes();
  ASSIGN_OR_RETURN(
      metrics_port_,
      ServeMetrics(
          server_.get(), "router", options_.host, options_.metrics_port,
          [this] {
            metrics_.SetNodeConnections(pool_->opened(), pool_->reused());
            return metrics_.Serialize(nullptr) + health_->MetricsText();
          },
          &metrics_server_));
  auto port = BindAndServe(server_.get(), options_.host, options_.http_port);
  if (!port.ok()) return port.status();
  http_port_ = *port;
  return absl::OkStatus();
}

void Router::Stop() {
  if (server_ != nullptr) server_->Stop();
  if (metrics_server_ != nullptr) metrics_server_->Stop();
  if (health_ != nullptr) health_->Stop();
}

void Router::Log(AccessRecord* record) {
  if (access_log_ == nullptr) return;
  record->total_ms = absl::ToDoubleMilliseconds(absl::Now() - record->start);
  access_log_->Write(*record);
}

void Router::Fail(const absl::Status& status, http::Response& res,
                  AccessRecord* record) {
  metrics_.CountRequest(status);
  res.status = HttpStatusFor(status.code());
  res.set_content(ErrorBody(ForClient(status)), "application/json");
  record->status = res.status;
  record->finish_reason.reset();
  record->reason = ErrorReason(status);
  Log(record);
}

absl::Status Router::ForClient(const absl::Status& status) const {
  return health_ != nullptr ? health_->Redacted(status) : status;
}

void Router::HandleCompletion(const http::Request& req, http::Response& res,
                              bool chat) {
  auto record = std::make_shared<AccessRecord>();
  record->start = absl::Now();
  record->endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
  auto admitted = Admit(req, chat, record.get());
  if (!admitted.ok()) return Fail(admitted.status(), res, record.get());
  // From here on every answer, error or not, names the request: the id the
  // body's "id" and the engine's trace carry too.
  res.set_header(kRequestIdHeader, absl::StrCat((*admitted)->request_id));
  Relay(*std::move(admitted), res, record, req.is_connection_closed);
}

}  // namespace kvcanary::engine
