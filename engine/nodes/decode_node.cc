// The decode node's life and its generate handler: the KV receiver wired to
// the node's options (ReceiverHost), start and stop (the HTTP routes, the
// KV gate and listener), and each request's way from its body through its
// reservation and a prefill node's answer to its stream. The reservations
// are decode_node_reservations.cc's, the KV port's accept loop
// decode_node_kv_port.cc's, the NDJSON stream decode_node_stream.cc's.
#include "engine/nodes/decode_node.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "engine/nodes/node_common.h"
#include "httplib.h"  // the client to the prefill node

namespace kvcanary::engine {
namespace {

constexpr absl::Duration kFrameTimeout = absl::Seconds(10);

// The prefill node's 200 answer: "ok", or what it recorded as its
// admission's abort_reason while going on anyway; its cached tokens, and
// the log-probabilities it computed (passed on as they came: the router
// checks them).
void ReadPrefillAnswer(const std::string& body, PrefillAnswer* answer) {
  answer->outcome = "ok";
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return;
  if (j.contains("cached_tokens") && j["cached_tokens"].is_number_unsigned()) {
    answer->cached_tokens = j["cached_tokens"].get<int>();
  }
  if (j.contains("abort_reason") && j["abort_reason"].is_string()) {
    answer->outcome = "abort_reason: " + j["abort_reason"].get<std::string>();
  }
  if (j.contains("first_logprobs") && j["first_logprobs"].is_array() &&
      j["first_logprobs"].size() == 1) {
    answer->first_logprobs = j["first_logprobs"][0];
  }
  if (j.contains("prompt_logprobs")) {
    answer->prompt_logprobs = j["prompt_logprobs"];
  }
}

// What this node's KV receiver checks each transfer against: the node's
// options (secret, faults, test knobs), model and page size.
KvReceiverOptions ReceiverOptions(const DecodeNodeOptions& options,
                                  const ModelConfig& cfg,
                                  const EngineLoop& loop) {
  KvReceiverOptions r;
  r.secret = &options.creds.internal;
  r.geometry.page_tokens = loop.pool().layout().page_tokens;
  r.geometry.n_layers = cfg.n_layers;
  r.geometry.kv_heads = cfg.n_kv_heads;
  r.geometry.head_dim = cfg.head_dim();
  r.geometry.vocab_size = cfg.vocab_size;
  r.watermark = loop.options().watermark;
  r.auth_timeout = options.kv_admission.auth_deadline;
  r.frame_timeout = kFrameTimeout;
  r.trust_sent_prompt_tokens = options.faults.has(Fault::kAdmissionAbortLost);
  r.trust_commit = options.faults.has(Fault::kPageCountMismatch);
  r.write_pages_on_arrival = options.faults.has(Fault::kAbortTransferRace);
  r.test_receive_delay = options.test_receive_delay;
  r.test_receive_bytes_per_s = options.test_receive_bytes_per_s;
  return r;
}

}  // namespace

// What the KV receiver asks of this node: its reservations, its metrics and
// its trace.
class DecodeNode::ReceiverHost : public KvReceiverHost {
 public:
  explicit ReceiverHost(DecodeNode* node) : node_(node) {}

  std::unique_ptr<KvClaim> Claim(const kv::Metadata& meta) override {
    return node_->Claim(meta);
  }
  void Refused(const char* reason) override {
    node_->metrics_.CountKvRefused(reason);
  }
  void Violation(const WatermarkViolation& violation) override {
    node_->trace_.Emit(FromViolation(violation));
    node_->metrics_.CountViolations({violation});
  }
  void Committed(const TraceEvent& event) override {
    node_->trace_.Emit(event);
  }

 private:
  DecodeNode* node_;
};

DecodeNode::DecodeNode(const Model* model, const DecodeNodeOptions& options)
    : model_(model),
      options_(options),
      trace_(TraceNode::kDecode, options.trace.reader_capacity,
             options.trace.read_sample_every),
      loop_(model, WithTrace(options.engine, &trace_), options.max_waiting),
      metrics_("decode") {
  if (options_.max_prompt_tokens <= 0) {
    options_.max_prompt_tokens = model->config.seq_len - 1;
  }
  CHECK_GT(options_.metadata_slots, 0);
  slots_.resize(options_.metadata_slots);
  receiver_host_ = std::make_unique<ReceiverHost>(this);
  receiver_ = std::make_unique<KvReceiver>(
      receiver_host_.get(), ReceiverOptions(options_, model->config, loop_));
}

DecodeNode::~DecodeNode() { Stop(); }

absl::Status DecodeNode::Start() {
  if (!options_.creds.internal.set()) {
    return absl::FailedPreconditionError(
        "the decode node needs the internal secret (--internal_secret_file)");
  }
  if (options_.prefill_urls.empty()) {
    return absl::FailedPreconditionError(
        "the decode node needs at least one prefill node (--prefill)");
  }
  RETURN_IF_ERROR(StartKvGate());
  ASSIGN_OR_RETURN(trace_file_,
                   TraceFileWriter::OpenIfSet(&trace_, options_.trace.file));
  server_ = MakeHttpServer(options_.http_threads, options_.creds.tls,
                           options_.http_max_unoccupied_per_address);
  server_->Post("/internal/v1/generate",
                [this](const http::Request& req, http::Response& res) {
                  HandleGenerate(req, res);
                });
  AddEngineNodeRoutes(server_.get(), "decode", options_.max_prompt_tokens,
                      &loop_, &metrics_, &trace_, &options_.creds);
  ASSIGN_OR_RETURN(
      metrics_port_,
      ServeMetrics(
          server_.get(), "decode", options_.host, options_.metrics_port,
          [this] {
            metrics_.SetKvPort(kv_gate_->admission().unauthenticated(),
                               kv_gate_->admission().idle_sessions());
            return metrics_.Serialize(&loop_);
          },
          &metrics_server_));
  auto listener =
      options_.kv_listen_fd >= 0
          ? kv::FrameListener::FromFd(options_.kv_listen_fd)
          : kv::FrameListener::Listen(options_.host, options_.kv_port);
  if (!listener.ok()) return listener.status();
  listener_ = *std::move(listener);
  kv_port_ = listener_->port();
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  auto port = BindAndServe(server_.get(), options_.host, options_.http_port);
  if (!port.ok()) return port.status();
  http_port_ = *port;
  return absl::OkStatus();
}

absl::Status DecodeNode::StartKvGate() {
  std::vector<std::string> hosts;
  for (const std::string& url : options_.prefill_urls) {
    ASSIGN_OR_RETURN(NodeUrl parsed,
                     ParseNodeUrl(url, options_.creds.tls.get()));
    hosts.push_back(parsed.host);
  }
  KvAdmissionOptions a = options_.kv_admission;
  ASSIGN_OR_RETURN(a.reserved_addresses, ResolveHosts(hosts));
  kv_gate_ = std::make_unique<KvGate>(a, receiver_host_.get(), receiver_.get(),
                                      options_.creds.tls.get());
  return absl::OkStatus();
}

void DecodeNode::Stop() {
  if (server_ != nullptr) server_->Stop();
  if (metrics_server_ != nullptr) metrics_server_->Stop();
  if (listener_ != nullptr) listener_->Close();
  if (accept_thread_.joinable()) accept_thread_.join();
  // Sessions waiting for their next transfer would wait out their idle
  // deadline; a transfer in flight fails (the sender sees the close).
  if (kv_gate_ != nullptr) kv_gate_->ShutdownAll();
  std::vector<std::pair<std::thread, std::shared_ptr<std::atomic<bool>>>>
      threads;
  {
    absl::MutexLock lock(&mu_);
    threads.swap(transfer_threads_);
  }
  for (auto& t : threads) t.first.join();
  trace_file_.reset();  // writes out what is queued
}

void DecodeNode::HandleGenerate(const http::Request& req, http::Response& res) {
  // What the prefill node answered for the request (its outcome null until
  // it has): passed on to the router with this node's own outcome.
  PrefillAnswer prefill;
  auto fail = [&](const absl::Status& status) {
    metrics_.CountRequest(status);
    RespondInternalError(res, status,
                         {{"prefill_outcome", prefill.outcome},
                          {"decode_outcome", OutcomeText(status)}});
  };
  if (!Authorized(req, options_.creds.internal, "internal secret", res)) return;
  auto body = ParseJsonObject(req.body);
  if (!body.ok()) return fail(body.status());
  auto parsed = ParseNodeRequest(*body);
  if (!parsed.ok()) return fail(parsed.status());
  const NodeRequest& request = *parsed;
  // A router resends a request whose kept connection closed before any
  // answer; this node may have read it already. It runs once.
  if (!accepted_.Accept(request.id, absl::Now())) {
    return fail(absl::AlreadyExistsError(absl::StrCat(
        "request ", request.id.value(),
        " was accepted by this node already; it is not run twice")));
  }
  if (static_cast<int>(request.prompt.size()) > options_.max_prompt_tokens) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("prompt of ", request.prompt.size(),
                     " tokens exceeds the decode node's limit of ",
                     options_.max_prompt_tokens)));
  }
  auto channel = std::make_shared<RequestChannel>();
  auto pending = Reserve(request, channel);
  if (!pending.ok()) return fail(pending.status());

  // Ask a prefill node to compute the prompt's K/V and ship it here.
  absl::Status transfer =
      RequestPrefill(request, **pending, req.is_connection_closed, &prefill);
  // No answer at all, and not because the router gave up: the prefill node
  // went away (a transfer it cut short is no corruption).
  const bool prefill_gone = !transfer.ok() && prefill.outcome.is_null() &&
                            !absl::IsCancelled(transfer);
  transfer = SettleTransfer(request.id, **pending, transfer, prefill_gone);
  transfer = InstallFromSlot(request.id, **pending, transfer);
  if (!transfer.ok()) {
    // If the request was finished already (a late write or the install's
    // stamp check refused it), its own reason is the one to give, and its
    // violations are counted. A receiver that only saw its stream cut short
    // by a prefill node that went away says less than the prefill node's
    // absence does (the router names the role that is down from it).
    while (auto event = channel->Wait(absl::ZeroDuration())) {
      if (event->kind == RequestEvent::Kind::kFinished && !event->status.ok()) {
        metrics_.CountViolations(event->violations);
        if (!prefill_gone || !event->violations.empty())
          transfer = event->status;
      }
    }
    loop_.Abort(request.id, transfer);
    return fail(transfer);
  }
  StreamDecoding(res, channel, request.id,
                 static_cast<int>(request.prompt.size()), prefill);
}

absl::Status DecodeNode::RequestPrefill(
    const NodeRequest& request, const PendingTransfer& pending,
    const std::function<bool()>& router_gone, PrefillAnswer* answer) {
  nlohmann::json pj;
  pj["request_id"] = request.id.value();
  pj["tenant_id"] = request.tenant.value();
  if (!request.cache_salt.empty()) pj["cache_salt"] = request.cache_salt;
  pj["prompt"] = request.prompt;
  pj["temperature"] = request.sampling.temperature;
  pj["top_p"] = request.sampling.top_p;
  pj["seed"] = request.sampling.seed;
  if (request.sampling.logprobs >= 0) {
    pj["logprobs"] = request.sampling.logprobs;
  }
  if (request.sampling.prompt_logprobs) pj["prompt_logprobs"] = true;
  pj["reserved_pages"] = pending.reservation.reserved_pages;
  pj["kv_peer"] = options_.name;
  pj["transfer_token"] = TransferTokenHex(pending.token);
  const std::string& url = options_.prefill_urls[next_prefill_.fetch_add(1) %
                                                 options_.prefill_urls.size()];
  std::unique_ptr<httplib::ClientImpl> client =
      NodeClient(url, options_.creds.tls.get());
  const int64_t us = absl::ToInt64Microseconds(options_.transfer_timeout);
  client->set_connection_timeout(5, 0);
  client->set_read_timeout(us / 1000000, us % 1000000);
  client->set_write_timeout(us / 1000000, us % 1000000);
  httplib::ClientImpl* const raw = client.get();
  httplib::Result pres(nullptr, httplib::Error::Unknown);
  bool abandoned = false;
  {
    const HangupWatch::Scope watch =
        hangups_.Watch(router_gone, [raw] { raw->stop(); });
    pres = client->Post(
        "/internal/v1/prefill",
        {{"Authorization", options_.creds.internal.AuthorizationHeader()}},
        pj.dump(), "application/json");
    abandoned = watch.fired();
  }
  if (abandoned) {
    return absl::CancelledError(
        "the router hung up while the prompt was prefilled and shipped");
  }
  if (!pres) return NodeCallError("prefill", url, pres.error());
  if (pres->status != 200) {
    absl::Status s = StatusFromInternalResponse(pres->status, pres->body);
    answer->outcome = OutcomeText(s);
    return s;
  }
  ReadPrefillAnswer(pres->body, answer);
  return absl::OkStatus();
}

}  // namespace kvcanary::engine
