#include "engine/nodes/router.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "engine/nodes/decode_stream.h"
#include "engine/nodes/node_common.h"
#include "engine/nodes/openai_api.h"
#include "engine/nodes/version.h"
#include "httplib.h"  // the client to the nodes

namespace kvcanary::engine {
namespace {

// A string field of a node's JSON, or null.
std::optional<std::string> OptionalString(const nlohmann::json& j,
                                          const char* field) {
  if (!j.is_object() || !j.contains(field) || !j[field].is_string()) {
    return std::nullopt;
  }
  return j[field].get<std::string>();
}

// Pulls one request's text out of the decode node's NDJSON stream:
//   {"prefill_outcome", "cached_tokens"}  once the prompt's K/V are in
//   {"tokens": [...]}                     as they are generated
//   {"finish_reason", ..., "decode_outcome", "error"?}  at the end
// and notes in the access record what the nodes reported. Not thread-safe:
// one caller at a time (the handler, then the streaming provider).
class TokenRelay {
 public:
  TokenRelay(std::shared_ptr<DecodeStream> stream, const Tokenizer* tokenizer,
             std::vector<std::string> stop, int prev_token,
             std::shared_ptr<AccessRecord> record)
      : stream_(std::move(stream)),
        tokenizer_(tokenizer),
        stop_(std::move(stop)),
        prev_token_(prev_token),
        record_(std::move(record)) {}

  // The next piece of text for the client in *delta; false at the end
  // (*r filled; error() says whether it failed).
  bool Next(CompletionResult* r, std::string* delta) {
    delta->clear();
    while (!finished_) {
      auto line = stream_->Next();
      if (!line.has_value()) {
        error_ = stream_->transport();
        finished_ = true;
        break;
      }
      if (line->contains("tokens")) {
        if (!record_->ttft_ms.has_value()) {
          record_->ttft_ms =
              absl::ToDoubleMilliseconds(absl::Now() - record_->start);
        }
        AppendTokens((*line)["tokens"], r, delta);
        if (!delta->empty()) return true;
        continue;
      }
      if (!line->contains("finish_reason")) {
        ReadPrefill(*line, r);
        continue;
      }
      finished_ = true;
      *delta += stop_.Flush();
      r->finish_reason =
          line->value("finish_reason", "") == "length" ? "length" : "stop";
      record_->decode_outcome = OptionalString(*line, "decode_outcome");
      if (line->contains("error")) {
        error_ = StatusFromInternalResponse(
            500, nlohmann::json{{"error", (*line)["error"]}}.dump());
      }
    }
    return !delta->empty();
  }
  const absl::Status& error() const { return error_; }
  void Cancel() { stream_->Cancel(); }

 private:
  void AppendTokens(const nlohmann::json& tokens, CompletionResult* r,
                    std::string* delta) {
    std::string text;
    for (const auto& t : tokens) {
      const int token = t.get<int>();
      text += tokenizer_->DecodeForPrint(prev_token_, token);
      prev_token_ = token;
      ++r->completion_tokens;
    }
    record_->completion_tokens = r->completion_tokens;
    StopMatcher::Emit emit = stop_.Feed(text);
    *delta += emit.text;
    if (emit.stopped) {
      // The router ends the request itself: the decode node's final line
      // (and its outcome) will not come.
      r->finish_reason = "stop";
      finished_ = true;
      stream_->Cancel();
    }
  }
  void ReadPrefill(const nlohmann::json& line, CompletionResult* r) {
    if (line.contains("cached_tokens") &&
        line["cached_tokens"].is_number_unsigned()) {
      r->cached_tokens = line["cached_tokens"].get<int>();
      record_->cached_tokens = r->cached_tokens;
    }
    record_->prefill_outcome = OptionalString(line, "prefill_outcome");
  }

  std::shared_ptr<DecodeStream> stream_;
  const Tokenizer* tokenizer_;
  StopMatcher stop_;
  int prev_token_;
  std::shared_ptr<AccessRecord> record_;
  absl::Status error_;
  bool finished_ = false;
};

}  // namespace

// An admitted request: what the relay needs, and its place in the in-flight
// counts, released when the last holder (the handler, or the streaming
// provider) lets go.
struct Router::Admitted {
  class InFlight {
   public:
    InFlight(std::atomic<int>* total, std::atomic<int>* tenant)
        : total_(total), tenant_(tenant) {}
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
    ~InFlight() {
      total_->fetch_sub(1);
      tenant_->fetch_sub(1);
    }

   private:
    std::atomic<int>* total_;
    std::atomic<int>* tenant_;
  };

  CompletionRequest request;
  TenantId tenant;
  std::vector<int> prompt;
  uint64_t request_id = 0;
  std::unique_ptr<InFlight> in_flight;
};

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

void Router::Health(const http::Request& req, http::Response& res) const {
  // Open to load balancers: up or not, per role. The nodes' URLs and the
  // processes' PIDs map the deployment for an attacker: admin token only.
  const bool detailed = req.has_header("Authorization");
  if (detailed && !options_.admin_token.set()) {
    RespondInternalError(
        res, absl::PermissionDeniedError(
                 "the router has no admin token (--trace-token-file)"));
    return;
  }
  if (detailed && !Authorized(req, options_.admin_token, "admin token", res))
    return;
  res.set_content(health_->HealthJson(detailed), "application/json");
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
  server_ = MakeHttpServer(options_.http_threads);
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
  // Answers `body` to a tenant's key; 401 otherwise.
  auto authenticated = [this](std::function<std::string()> body) {
    return [this, body](const http::Request& req, http::Response& res) {
      auto tenant = CheckKey(req);
      if (!tenant.ok()) {
        res.status = HttpStatusFor(tenant.status().code());
        res.set_content(ErrorBody(tenant.status()), "application/json");
        return;
      }
      res.set_content(body(), "application/json");
    };
  };
  server_->Get(
      "/v1/models", authenticated([this] {
        return ModelsJson(
            options_.model_name, created_, settings_.context_tokens,
            std::min(settings_.max_prompt_tokens, settings_.context_tokens));
      }));
  server_->Get("/version", authenticated([this] {
                 VersionInfo v;
                 v.version = kEngineVersion;
                 v.watermark = settings_.watermark;
                 v.prefix_cache = settings_.prefix_cache;
                 v.cache_salt = settings_.cache_salt;
                 v.host_tier_pages = settings_.host_tier_pages;
                 v.tenant_header = options_.tenant_header;
                 v.free_list = settings_.free_list;
                 v.kv_checksum = settings_.kv_checksum;
                 v.trace_format = settings_.trace_format;
                 v.max_model_len = settings_.context_tokens;
                 v.max_prompt_tokens = std::min(settings_.max_prompt_tokens,
                                                settings_.context_tokens);
                 v.page_tokens = settings_.page_tokens;
                 return VersionJson(v);
               }));
  server_->Get("/health", [this](const http::Request& req,
                                 http::Response& res) { Health(req, res); });
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
  res.set_content(ErrorBody(status), "application/json");
  record->status = res.status;
  record->finish_reason.reset();
  record->reason = ErrorReason(status);
  Log(record);
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

absl::StatusOr<const Tenant*> Router::CheckKey(const http::Request& req) const {
  return tenants_->Authenticate(req.get_header_value("Authorization"));
}

bool Router::ExpectContinue(const http::Request& req, http::Response& res) {
  if (req.path == "/health" || req.path == "/metrics") return true;
  auto tenant = CheckKey(req);
  if (tenant.ok()) return true;
  if (absl::StartsWith(req.path, "/v1/") &&
      absl::EndsWith(req.path, "completions")) {
    metrics_.CountRequest(tenant.status());
  }
  res.status = HttpStatusFor(tenant.status().code());
  res.set_content(ErrorBody(tenant.status()), "application/json");
  return false;
}

absl::StatusOr<const Tenant*> Router::RequestTenant(
    const http::Request& req, AccessRecord* record) const {
  ASSIGN_OR_RETURN(const Tenant* tenant, CheckKey(req));
  record->tenant = tenant->name;
  if (!tenant->gateway || options_.tenant_header.empty()) return tenant;
  // A gateway's key: the request is the named tenant's, for its limits, its
  // cache and its pages' stamps.
  std::vector<absl::string_view> named;
  for (const auto& [name, value] : req.headers) {
    if (absl::EqualsIgnoreCase(name, options_.tenant_header)) {
      named.push_back(value);
    }
  }
  ASSIGN_OR_RETURN(
      tenant, tenants_->ForGateway(*tenant, options_.tenant_header, named));
  record->tenant = tenant->name;
  return tenant;
}

absl::StatusOr<std::shared_ptr<Router::Admitted>> Router::Admit(
    const http::Request& req, bool chat, AccessRecord* record) {
  auto tenant = RequestTenant(req, record);
  if (!tenant.ok()) return tenant.status();
  auto parsed = ParseCompletionRequest(req.body, chat);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->model.empty() && parsed->model != options_.model_name) {
    return ModelNotFound(parsed->model);
  }
  record->stream = parsed->stream;
  auto a = std::make_shared<Admitted>();
  // Admission: the one length check, against the smallest node limit.
  // (admission-abort-lost: the check against the prefill tier's limit is
  // left to the prefill node, as in the incident.)
  const int prompt_limit = options_.faults.has(Fault::kAdmissionAbortLost)
                               ? settings_.decode_max_prompt_tokens
                               : settings_.max_prompt_tokens;
  // A prompt too long for any tokenization to fit is refused before
  // megabytes are tokenized: no token covers more than the longest piece
  // (BOS and the dummy prefix aside).
  const int64_t min_tokens = static_cast<int64_t>(parsed->prompt.size()) /
                             std::max(1, tokenizer_->max_token_length());
  if (min_tokens > prompt_limit) {
    return PromptBytesExceedLimit(
        parsed->prompt.size(), min_tokens,
        std::min(settings_.max_prompt_tokens, settings_.context_tokens));
  }
  a->prompt = tokenizer_->Encode(parsed->prompt, /*bos=*/true, /*eos=*/false);
  const int prompt_tokens = static_cast<int>(a->prompt.size());
  record->prompt_tokens = prompt_tokens;
  if (prompt_tokens > prompt_limit ||
      prompt_tokens + parsed->max_tokens > settings_.context_tokens) {
    return ContextLengthExceeded(
        prompt_tokens, parsed->max_tokens,
        std::min(settings_.max_prompt_tokens, settings_.context_tokens),
        settings_.context_tokens);
  }
  if (in_flight_.fetch_add(1) >= options_.max_in_flight) {
    in_flight_.fetch_sub(1);
    return absl::ResourceExhaustedError(
        "too many requests in flight; retry later");
  }
  std::atomic<int>& tenant_count = tenant_in_flight_[(*tenant)->id.value()];
  const int tenant_limit = (*tenant)->max_concurrent_requests;
  if (tenant_count.fetch_add(1) >= tenant_limit && tenant_limit > 0) {
    tenant_count.fetch_sub(1);
    in_flight_.fetch_sub(1);
    return absl::ResourceExhaustedError(
        absl::StrCat("tenant ", (*tenant)->name, " has ", tenant_limit,
                     " requests in flight; retry later"));
  }
  a->in_flight =
      std::make_unique<Admitted::InFlight>(&in_flight_, &tenant_count);
  a->request = *std::move(parsed);
  a->tenant = (*tenant)->id;
  a->request_id = request_ids_.Next().value();
  record->request_id = a->request_id;
  return a;
}

std::string Router::DecodeRequestBody(const Admitted& a) const {
  const CompletionRequest& request = a.request;
  nlohmann::json body;
  body["request_id"] = a.request_id;
  body["tenant_id"] = a.tenant.value();
  if (!request.cache_salt.empty()) body["cache_salt"] = request.cache_salt;
  body["prompt"] = a.prompt;
  body["max_tokens"] = request.max_tokens;
  body["temperature"] = request.temperature;
  body["top_p"] = request.top_p;
  if (request.seed.has_value()) body["seed"] = *request.seed;
  return body.dump();
}

CompletionResult Router::NewResult(const Admitted& a) const {
  CompletionResult result;
  result.id =
      absl::StrCat(a.request.chat ? "chatcmpl-" : "cmpl-", a.request_id);
  result.model = options_.model_name;
  result.created = absl::ToUnixSeconds(absl::Now());
  result.prompt_tokens = static_cast<int>(a.prompt.size());
  return result;
}

std::shared_ptr<DecodeStream> Router::OpenDecode(
    const Admitted& a, http::Response& res, AccessRecord* record,
    const std::function<bool()>& client_gone) {
  // Nodes that are down are skipped; none of a role up: 503 naming it.
  auto route = health_->Pick(next_node_.fetch_add(1));
  if (!route.ok()) {
    Fail(route.status(), res, record);
    return nullptr;
  }
  // The decode node asks a prefill node of its own configuration.
  auto stream = std::make_shared<DecodeStream>(
      route->decode_url, options_.internal_secret.AuthorizationHeader(),
      DecodeRequestBody(a), options_.node_timeout, pool_.get());
  absl::Status started;
  {
    const HangupWatch::Scope watch =
        hangups_.Watch(client_gone, [stream] { stream->Cancel(); });
    started = stream->WaitHeaders();
    if (watch.fired()) {
      started =
          absl::CancelledError("the client hung up before its first token");
    }
  }
  if (absl::IsCancelled(started)) {
    // Nothing was sent: logged as nginx logs it (499, client closed
    // request); the response goes nowhere.
    metrics_.CountRequest(started);
    record->status = 499;
    record->reason = "client_disconnected";
    Log(record);
    return nullptr;
  }
  if (!started.ok()) {
    // What each node reported, if the decode node answered.
    const nlohmann::json error = stream->error_json();
    record->prefill_outcome = OptionalString(error, "prefill_outcome");
    record->decode_outcome = OptionalString(error, "decode_outcome");
    Fail(started, res, record);
    return nullptr;
  }
  return stream;
}

void Router::Relay(std::shared_ptr<Admitted> a, http::Response& res,
                   std::shared_ptr<AccessRecord> record,
                   const std::function<bool()>& client_gone) {
  const CompletionRequest& request = a->request;
  const bool chat = request.chat;
  std::shared_ptr<DecodeStream> stream =
      OpenDecode(*a, res, record.get(), client_gone);
  if (stream == nullptr) return;  // answered (or abandoned) already

  CompletionResult result = NewResult(*a);
  auto relay = std::make_shared<TokenRelay>(stream, tokenizer_, request.stop,
                                            a->prompt.back(), record);
  if (!request.stream) {
    std::string delta;
    while (relay->Next(&result, &delta)) result.text += delta;
    if (!relay->error().ok()) return Fail(relay->error(), res, record.get());
    metrics_.CountRequest(absl::OkStatus());
    res.set_content(CompletionResponseJson(result, chat), "application/json");
    record->status = 200;
    record->finish_reason = result.finish_reason;
    return Log(record.get());
  }
  // The record is logged once: when the stream ends, or when the client
  // goes away first (the releaser runs in either case, last).
  auto logged = std::make_shared<bool>(false);
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, a, relay, result, chat, record, logged](
          size_t, http::DataSink& sink) mutable {
        std::string delta;
        if (relay->Next(&result, &delta)) {
          const std::string chunk =
              StreamChunkSse(result, delta, chat, /*final_chunk=*/false);
          result.text += delta;
          if (!sink.write(chunk.data(), chunk.size())) {
            relay->Cancel();
            return false;
          }
          return true;
        }
        std::string tail;
        record->status = 200;  // sent with the first chunk
        if (relay->error().ok()) {
          tail = StreamChunkSse(result, "", chat, /*final_chunk=*/true) +
                 StreamDoneSse();
          record->finish_reason = result.finish_reason;
        } else {
          tail =
              "data: " + ErrorBody(relay->error()) + "\n\n" + StreamDoneSse();
          record->reason = ErrorReason(relay->error());
        }
        metrics_.CountRequest(relay->error());
        sink.write(tail.data(), tail.size());
        sink.done();
        *logged = true;
        Log(record.get());
        return true;
      },
      [this, relay, record, logged](bool) {
        relay->Cancel();
        if (*logged) return;
        metrics_.CountRequest(absl::CancelledError("client disconnected"));
        record->status = 200;
        record->reason = "client_disconnected";
        Log(record.get());
      });
}

}  // namespace kvcanary::engine
