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
#include "engine/nodes/token_relay.h"
#include "engine/nodes/version.h"
#include "httplib.h"  // the client to the nodes

namespace kvcanary::engine {
// An admitted request: what the relay needs, and its place in the in-flight
// counts, released when the last holder (the handler, or the streaming
// provider) lets go.
struct Router::Admitted {
  // `count` places in each (one per choice).
  class InFlight {
   public:
    InFlight(std::atomic<int>* total, std::atomic<int>* tenant, int count)
        : total_(total), tenant_(tenant), count_(count) {}
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
    ~InFlight() {
      total_->fetch_sub(count_);
      tenant_->fetch_sub(count_);
    }

   private:
    std::atomic<int>* total_;
    std::atomic<int>* tenant_;
    const int count_;
  };

  CompletionRequest request;
  TenantId tenant;
  std::vector<int> prompt;
  uint64_t request_id = 0;  // the answer's; choice 0's
  // Each choice is a sequence of its own, under its own id.
  std::vector<uint64_t> choice_ids;
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
  // Each choice takes a place, so `n` cannot take another tenant's share.
  const int n = parsed->n;
  if (in_flight_.fetch_add(n) + n > options_.max_in_flight) {
    in_flight_.fetch_sub(n);
    return absl::ResourceExhaustedError(
        "too many requests in flight; retry later");
  }
  std::atomic<int>& tenant_count = tenant_in_flight_[(*tenant)->id.value()];
  const int tenant_limit = (*tenant)->max_concurrent_requests;
  if (tenant_count.fetch_add(n) + n > tenant_limit && tenant_limit > 0) {
    tenant_count.fetch_sub(n);
    in_flight_.fetch_sub(n);
    return absl::ResourceExhaustedError(
        absl::StrCat("tenant ", (*tenant)->name, " has ", tenant_limit,
                     " requests in flight; retry later"));
  }
  a->in_flight =
      std::make_unique<Admitted::InFlight>(&in_flight_, &tenant_count, n);
  a->request = *std::move(parsed);
  a->tenant = (*tenant)->id;
  for (int i = 0; i < n; ++i) {
    a->choice_ids.push_back(request_ids_.Next().value());
  }
  a->request_id = a->choice_ids[0];
  record->request_id = a->request_id;
  return a;
}

std::string Router::DecodeRequestBody(const Admitted& a, int choice) const {
  const CompletionRequest& request = a.request;
  nlohmann::json body;
  body["request_id"] = a.choice_ids[choice];
  body["tenant_id"] = a.tenant.value();
  if (!request.cache_salt.empty()) body["cache_salt"] = request.cache_salt;
  body["prompt"] = a.prompt;
  body["max_tokens"] = request.max_tokens;
  body["temperature"] = request.temperature;
  body["top_p"] = request.top_p;
  // Choice i samples with seed + i (seed 0 when none was given): the
  // choices differ, and each is reproducible.
  if (request.seed.has_value() || choice > 0) {
    body["seed"] = request.seed.value_or(0) + static_cast<uint64_t>(choice);
  }
  if (request.logprobs >= 0) body["logprobs"] = request.logprobs;
  if (request.echo && request.logprobs >= 0) body["prompt_logprobs"] = true;
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

absl::StatusOr<std::shared_ptr<DecodeStream>> Router::StartDecode(
    const Admitted& a, int choice) {
  // Nodes that are down are skipped; none of a role up: 503 naming it.
  ASSIGN_OR_RETURN(const NodeHealth::Route route,
                   health_->Pick(next_node_.fetch_add(1)));
  // The decode node asks a prefill node of its own configuration.
  return std::make_shared<DecodeStream>(
      route.decode_url, options_.internal_secret.AuthorizationHeader(),
      DecodeRequestBody(a, choice), options_.node_timeout, pool_.get());
}

bool Router::AwaitDecode(DecodeStream& stream, http::Response& res,
                         AccessRecord* record,
                         const std::function<bool()>& client_gone) {
  absl::Status started;
  {
    const HangupWatch::Scope watch =
        hangups_.Watch(client_gone, [&stream] { stream.Cancel(); });
    started = stream.WaitHeaders();
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
    return false;
  }
  if (!started.ok()) {
    // What each node reported, if the decode node answered.
    const nlohmann::json error = stream.error_json();
    record->prefill_outcome = OptionalString(error, "prefill_outcome");
    record->decode_outcome = OptionalString(error, "decode_outcome");
    Fail(started, res, record);
    return false;
  }
  return true;
}

std::vector<std::shared_ptr<TokenRelay>> Router::OpenChoices(
    const Admitted& a, http::Response& res,
    const std::shared_ptr<AccessRecord>& record,
    const std::function<bool()>& client_gone) {
  const CompletionRequest& request = a.request;
  std::vector<std::shared_ptr<DecodeStream>> streams;
  auto give_up = [&] {
    for (const auto& s : streams) s->Cancel();
    return std::vector<std::shared_ptr<TokenRelay>>();
  };
  // Choice 0 first, alone: once its first token is out, its prompt's pages
  // are in the prefill node's prefix cache, where the others find them.
  for (int i = 0; i < request.n; ++i) {
    auto stream = StartDecode(a, i);
    if (!stream.ok()) {
      Fail(stream.status(), res, record.get());
      return give_up();
    }
    streams.push_back(*stream);
    if (i == 0 && !AwaitDecode(**stream, res, record.get(), client_gone)) {
      return give_up();
    }
  }
  for (int i = 1; i < request.n; ++i) {
    if (!AwaitDecode(*streams[i], res, record.get(), client_gone)) {
      return give_up();
    }
  }
  std::vector<std::shared_ptr<TokenRelay>> relays;
  for (int i = 0; i < request.n; ++i) {
    // The access record notes what choice 0's nodes reported; the others
    // note theirs apart (their completion tokens are added at the end).
    relays.push_back(std::make_shared<TokenRelay>(
        streams[i], tokenizer_,
        RelayOptions{request.stop, a.prompt, request.prompt, request.echo,
                     request.logprobs},
        i == 0 ? record : std::make_shared<AccessRecord>(*record)));
  }
  return relays;
}

void Router::Relay(std::shared_ptr<Admitted> a, http::Response& res,
                   std::shared_ptr<AccessRecord> record,
                   const std::function<bool()>& client_gone) {
  const CompletionRequest& request = a->request;
  const bool chat = request.chat;
  std::vector<std::shared_ptr<TokenRelay>> relays =
      OpenChoices(*a, res, record, client_gone);
  if (relays.empty()) return;  // answered (or abandoned) already

  std::vector<CompletionResult> results;
  for (int i = 0; i < request.n; ++i) {
    results.push_back(NewResult(*a));
    results.back().index = i;
    results.back().has_logprobs = request.logprobs >= 0;
  }
  if (!request.stream) {
    int completion_tokens = 0;
    for (int i = 0; i < request.n; ++i) {
      CompletionResult& result = results[i];
      std::string delta;
      while (relays[i]->Next(&result, &delta, &result.logprobs)) {
        result.text += delta;
      }
      if (!relays[i]->error().ok()) {
        for (const auto& r : relays) r->Cancel();
        return Fail(relays[i]->error(), res, record.get());
      }
      completion_tokens += result.completion_tokens;
    }
    metrics_.CountRequest(absl::OkStatus());
    res.set_content(CompletionResponseJson(results, chat), "application/json");
    record->status = 200;
    record->completion_tokens = completion_tokens;
    record->finish_reason = results[0].finish_reason;
    return Log(record.get());
  }
  RelayStream(std::move(a), std::move(relays), std::move(results), res,
              std::move(record));
}

// The streaming answer's state, kept by its provider: the choices' relays,
// each one's text so far, and which are still running.
struct Router::StreamState {
  std::shared_ptr<Admitted> admitted;
  std::vector<std::shared_ptr<TokenRelay>> relays;
  std::vector<CompletionResult> results;
  std::vector<bool> finished;
  int running = 0;
  size_t next = 0;      // the choice read next (round robin)
  bool logged = false;  // the record is logged once
  void CancelAll() {
    for (const auto& r : relays) r->Cancel();
  }
};

void Router::RelayStream(std::shared_ptr<Admitted> a,
                         std::vector<std::shared_ptr<TokenRelay>> relays,
                         std::vector<CompletionResult> results,
                         http::Response& res,
                         std::shared_ptr<AccessRecord> record) {
  auto state = std::make_shared<StreamState>();
  state->admitted = std::move(a);
  state->running = static_cast<int>(relays.size());
  state->finished.assign(relays.size(), false);
  state->relays = std::move(relays);
  state->results = std::move(results);
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, state, record](size_t, http::DataSink& sink) {
        return StreamNext(*state, *record, sink);
      },
      [this, state, record](bool) {
        state->CancelAll();
        if (state->logged) return;
        metrics_.CountRequest(absl::CancelledError("client disconnected"));
        record->status = 200;
        record->reason = "client_disconnected";
        Log(record.get());
      });
}

bool Router::StreamNext(StreamState& st, AccessRecord& record,
                        http::DataSink& sink) {
  const bool chat = st.admitted->request.chat;
  const size_t n = st.relays.size();
  while (st.finished[st.next]) st.next = (st.next + 1) % n;
  const size_t i = st.next;
  st.next = (i + 1) % n;
  CompletionResult& result = st.results[i];
  std::string delta;
  std::vector<LogprobEntry> logprobs;
  if (st.relays[i]->Next(&result, &delta, &logprobs)) {
    const std::string chunk =
        StreamChunkSse(result, delta, chat, /*final_chunk=*/false, logprobs);
    result.text += delta;
    if (!sink.write(chunk.data(), chunk.size())) {
      st.CancelAll();
      return false;
    }
    return true;
  }
  std::string tail;
  record.status = 200;  // sent with the first chunk
  const absl::Status& error = st.relays[i]->error();
  if (!error.ok()) {
    st.CancelAll();
    tail = "data: " + ErrorBody(error) + "\n\n" + StreamDoneSse();
    record.reason = ErrorReason(error);
    st.running = 0;
  } else {
    st.finished[i] = true;
    --st.running;
    // With one choice its final chunk carries the usage; with more, a last
    // event of its own does.
    tail = StreamChunkSse(result, "", chat, /*final_chunk=*/true, {},
                          /*usage=*/n == 1);
    if (st.running == 0) {
      if (n > 1) tail += StreamUsageSse(st.results, chat);
      tail += StreamDoneSse();
      record.finish_reason = st.results[0].finish_reason;
      record.completion_tokens = 0;
      for (const CompletionResult& r : st.results) {
        record.completion_tokens += r.completion_tokens;
      }
    }
  }
  sink.write(tail.data(), tail.size());
  if (st.running > 0) return true;
  metrics_.CountRequest(error);
  sink.done();
  st.logged = true;
  Log(&record);
  return true;
}

}  // namespace kvcanary::engine
