#include "engine/nodes/prefill_node.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "engine/core/kv_export.h"
#include "engine/nodes/logprobs_wire.h"
#include "engine/nodes/node_common.h"
#include "engine/transfer/kv_sender.h"

namespace kvcanary::engine {
namespace {
constexpr absl::Duration kFrameTimeout = absl::Seconds(10);

std::unique_ptr<KvEventPublisher> MakeKvEvents(const PrefillNodeOptions& o) {
  if (o.kv_events.endpoint.empty()) return nullptr;
  KvEventPublisherOptions k = o.kv_events;
  k.password = o.creds.trace;
  k.block_size = o.engine.page_tokens;
  return std::make_unique<KvEventPublisher>(std::move(k));
}

EngineOptions WithKvEvents(EngineOptions options, KvEventSink* sink) {
  options.kv_events = sink;
  return options;
}

}  // namespace

PrefillNode::PrefillNode(const Model* model, const PrefillNodeOptions& options)
    : model_(model),
      options_(options),
      trace_(TraceNode::kPrefill, options.trace.reader_capacity,
             options.trace.read_sample_every),
      kv_events_(MakeKvEvents(options)),
      loop_(model,
            WithKvEvents(WithTrace(options.engine, &trace_), kv_events_.get()),
            options.max_waiting),
      metrics_("prefill"),
      sender_(&options_.creds.internal, kFrameTimeout,
              options_.creds.tls.get()) {
  if (options_.max_prompt_tokens <= 0) {
    options_.max_prompt_tokens = model->config.seq_len / 2;
  }
  sender_.set_send_attempts(options_.kv_send_attempts);
}

PrefillNode::~PrefillNode() { Stop(); }

void PrefillNode::AddKvPeer(const KvPeer& peer) {
  absl::MutexLock lock(&peers_mu_);
  for (KvPeer& p : peers_) {
    if (p.name == peer.name) {
      p = peer;
      return;
    }
  }
  peers_.push_back(peer);
}

absl::StatusOr<KvPeer> PrefillNode::FindKvPeer(const std::string& name) {
  absl::MutexLock lock(&peers_mu_);
  if (name.empty() && peers_.size() == 1) return peers_[0];
  for (const KvPeer& p : peers_) {
    if (p.name == name) return p;
  }
  // A request's mistake, not this node's: 400.
  return absl::InvalidArgumentError(absl::StrCat(
      "no KV peer named '", name, "' in this prefill node's configuration"));
}

absl::Status PrefillNode::Start() {
  if (!options_.creds.internal.set()) {
    return absl::FailedPreconditionError(
        "the prefill node needs the internal secret (--internal_secret_file)");
  }
  for (const KvPeer& p : options_.kv_peers) AddKvPeer(p);
  RETURN_IF_ERROR(StartKvEvents());
  ASSIGN_OR_RETURN(trace_file_,
                   TraceFileWriter::OpenIfSet(&trace_, options_.trace.file));
  server_ = MakeHttpServer(options_.http_threads, options_.creds.tls,
                           options_.http_max_unoccupied_per_address);
  server_->Post("/internal/v1/prefill",
                [this](const http::Request& req, http::Response& res) {
                  HandlePrefill(req, res);
                });
  AddEngineNodeRoutes(server_.get(), "prefill", options_.max_prompt_tokens,
                      &loop_, &metrics_, &trace_, &options_.creds);
  ASSIGN_OR_RETURN(
      metrics_port_,
      ServeMetrics(
          server_.get(), "prefill", options_.host, options_.metrics_port,
          [this] {
            if (kv_events_ != nullptr) {
              metrics_.SetKvEventsDropped(kv_events_->dropped_events());
            }
            metrics_.SetNodeConnections(sender_.opened(), sender_.reused());
            return metrics_.Serialize(&loop_);
          },
          &metrics_server_));
  auto port = BindAndServe(server_.get(), options_.host, options_.http_port);
  if (!port.ok()) return port.status();
  http_port_ = *port;
  return absl::OkStatus();
}

void PrefillNode::Stop() {
  if (server_ != nullptr) server_->Stop();
  if (metrics_server_ != nullptr) metrics_server_->Stop();
  trace_file_.reset();  // writes out what is queued
  if (kv_events_ != nullptr) kv_events_->Stop();
}

absl::Status PrefillNode::StartKvEvents() {
  if (kv_events_ == nullptr) return absl::OkStatus();
  if (options_.engine.prefix_cache == PrefixCacheMode::kOff) {
    return absl::FailedPreconditionError(
        "--kv-events publishes the prefix cache's block events: it needs "
        "--prefix-cache=tenant or global");
  }
  if (!options_.creds.trace.set()) {
    return absl::FailedPreconditionError(
        "--kv-events needs --trace-token-file: subscribers authenticate with "
        "the trace token");
  }
  metrics_.AddKvEventsMetrics();
  return kv_events_->Start();
}

std::string PrefillNode::kv_events_endpoint() const {
  return kv_events_ != nullptr ? kv_events_->endpoint() : "";
}

std::string PrefillNode::kv_events_replay_endpoint() const {
  return kv_events_ != nullptr ? kv_events_->replay_endpoint() : "";
}

absl::StatusOr<PrefillNode::TransferTarget> PrefillNode::ParseTransferTarget(
    const nlohmann::json& body) {
  TransferTarget t;
  ASSIGN_OR_RETURN(t.reserved_pages, JsonUint(body, "reserved_pages"));
  ASSIGN_OR_RETURN(const std::string token_hex,
                   JsonString(body, "transfer_token"));
  ASSIGN_OR_RETURN(t.token, TransferTokenFromHex(token_hex));
  std::string peer_name;
  if (body.contains("kv_peer")) {
    ASSIGN_OR_RETURN(peer_name, JsonString(body, "kv_peer"));
  }
  ASSIGN_OR_RETURN(t.peer, FindKvPeer(peer_name));
  return t;
}

PrefillNode::Admission PrefillNode::Admit(std::vector<int>* prompt) const {
  Admission admission;
  if (static_cast<int>(prompt->size()) <= options_.max_prompt_tokens) {
    return admission;
  }
  absl::Status rejected = absl::InvalidArgumentError(
      absl::StrCat("prompt of ", prompt->size(),
                   " tokens exceeds the prefill node's limit of ",
                   options_.max_prompt_tokens));
  if (options_.faults.has(Fault::kAdmissionAbortLost)) {
    admission.abort_reason = rejected;
    prompt->resize(1);  // the placeholder: BOS
  } else {
    admission.status = rejected;
  }
  return admission;
}

absl::Status PrefillNode::RunPrefill(const NodeRequest& request,
                                     std::shared_ptr<RequestChannel> channel,
                                     RequestEvent* prefilled) {
  SamplingParams sampling = request.sampling;
  sampling.max_tokens = 1;  // prefill samples the first token only
  RETURN_IF_ERROR(loop_.Submit(
      request.tenant, request.prompt, sampling,
      {request.id, SequenceRole::kPrefillOnly, request.cache_salt}, channel));
  auto event = channel->Wait(options_.transfer_timeout);
  if (!event.has_value()) {
    const absl::Status late =
        absl::DeadlineExceededError("prefill did not run in time");
    loop_.Abort(request.id, late);
    return late;
  }
  if (event->kind == RequestEvent::Kind::kFinished) {
    metrics_.CountViolations(event->violations);
    if (event->status.ok()) {
      return absl::InternalError("prefill finished without a first token");
    }
    return event->status;
  }
  CHECK(event->kind == RequestEvent::Kind::kPrefilled);
  *prefilled = *std::move(event);
  return absl::OkStatus();
}

kv::Metadata PrefillNode::MetadataFor(const NodeRequest& request,
                                      const TransferTarget& target) const {
  const ModelConfig& cfg = model_->config;
  kv::Metadata meta;
  meta.request = request.id;
  meta.tenant = request.tenant;
  meta.prompt_tokens = static_cast<uint32_t>(request.prompt.size());
  meta.reserved_pages = static_cast<uint32_t>(target.reserved_pages);
  meta.page_tokens = static_cast<uint32_t>(loop_.options().page_tokens);
  meta.n_layers = static_cast<uint32_t>(cfg.n_layers);
  meta.kv_heads = static_cast<uint32_t>(cfg.n_kv_heads);
  meta.head_dim = static_cast<uint32_t>(cfg.head_dim());
  meta.transfer_token = target.token;
  return meta;
}

void PrefillNode::AwaitFinished(RequestChannel& channel) {
  for (auto e = channel.Wait(options_.transfer_timeout); e.has_value();
       e = channel.Wait(options_.transfer_timeout)) {
    if (e->kind == RequestEvent::Kind::kFinished) {
      metrics_.CountViolations(e->violations);
      return;
    }
  }
}

void PrefillNode::HandlePrefill(const http::Request& req, http::Response& res) {
  auto fail = [&](const absl::Status& status) {
    metrics_.CountRequest(status);
    RespondInternalError(res, status);
  };
  if (!Authorized(req, options_.creds.internal, "internal secret", res)) return;
  auto body = ParseJsonObject(req.body);
  if (!body.ok()) return fail(body.status());
  auto parsed = ParseNodeRequest(*body);
  if (!parsed.ok()) return fail(parsed.status());
  auto target = ParseTransferTarget(*body);
  if (!target.ok()) return fail(target.status());
  NodeRequest& request = *parsed;
  const Admission admission = Admit(&request.prompt);
  if (!admission.status.ok()) return fail(admission.status);
  auto channel = std::make_shared<RequestChannel>();
  RequestEvent prefilled;
  absl::Status ran = RunPrefill(request, channel, &prefilled);
  if (!ran.ok()) return fail(ran);

  uint64_t bytes = 0;
  absl::Status verdict =
      SendKv(target->peer, MetadataFor(request, *target), prefilled.block_table,
             prefilled.first_token, &bytes);
  // Only now can no write into the pages still arrive: free them.
  loop_.FinishTransfer(request.id, verdict);
  AwaitFinished(*channel);
  metrics_.CountTransfer(bytes, verdict);
  if (!verdict.ok()) return fail(verdict);
  metrics_.CountRequest(absl::OkStatus());
  nlohmann::json j;
  j["pages_sent"] =
      loop_.pool().PagesFor(static_cast<int>(request.prompt.size())) *
      model_->config.n_layers;
  j["bytes_sent"] = bytes;
  j["cached_tokens"] = prefilled.cached_tokens;
  if (request.sampling.logprobs >= 0) {
    j["first_logprobs"] = LogprobsToJson(prefilled.logprobs);
  }
  if (request.sampling.prompt_logprobs) {
    j["prompt_logprobs"] = LogprobsToJson(prefilled.prompt_logprobs);
  }
  // What this node wrote into the admission record, for the router's access
  // log; the decode node does not act on it (with admission-abort-lost,
  // that is the bug: the rejection is recorded and the request goes on).
  if (!admission.abort_reason.ok()) {
    j["abort_reason"] = OutcomeText(admission.abort_reason);
  }
  res.set_content(j.dump(), "application/json");
}

absl::Status PrefillNode::SendKv(const KvPeer& peer, const kv::Metadata& meta,
                                 const std::vector<PageRef>& block_table,
                                 int first_token, uint64_t* bytes_sent) {
  int tokens_to_ship = static_cast<int>(meta.prompt_tokens);
  if (options_.faults.has(Fault::kPageCountMismatch)) {
    // The bug: pages = tokens / page_tokens, rounded down.
    const int pt = static_cast<int>(meta.page_tokens);
    tokens_to_ship = tokens_to_ship / pt * pt;
  }
  return sender_.Send(peer, meta,
                      ExportKvPages(loop_.pool(), block_table, tokens_to_ship),
                      first_token, options_.damage, bytes_sent);
}

}  // namespace kvcanary::engine
