#include "engine/nodes/decode_node.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "engine/nodes/logprobs_wire.h"
#include "engine/nodes/node_common.h"
#include "httplib.h"  // the client to the prefill node

namespace kvcanary::engine {
namespace {

constexpr absl::Duration kFrameTimeout = absl::Seconds(10);

std::string NdjsonLine(const nlohmann::json& j) { return j.dump() + "\n"; }

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

// The NDJSON line for a tokens or finished event. The request's first
// token's log-probabilities came from the prefill node (`first`), the
// others are this node's.
nlohmann::json EventLine(const RequestEvent& event, int prompt_tokens,
                         int cached_tokens, const nlohmann::json& first) {
  nlohmann::json line;
  if (event.kind == RequestEvent::Kind::kTokens) {
    line["tokens"] = event.tokens;
    if (!event.logprobs.empty()) {
      nlohmann::json logprobs = LogprobsToJson(event.logprobs);
      if (event.logprobs[0].token < 0) logprobs[0] = first;
      line["logprobs"] = std::move(logprobs);
    }
    return line;
  }
  line["finish_reason"] = FinishReasonName(event.reason);
  line["prompt_tokens"] = prompt_tokens;
  line["completion_tokens"] = event.num_output_tokens;
  line["violations"] = event.violations.size();
  line["cached_tokens"] = cached_tokens;
  line["decode_outcome"] = OutcomeText(event.status);
  if (!event.status.ok()) {
    line["error"] =
        nlohmann::json::parse(InternalErrorBody(event.status))["error"];
  }
  return line;
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

// A reservation a KV receiver claimed: the receiver's verdict or its
// transfer goes to the request's handler through the PendingTransfer.
class DecodeNode::ClaimedTransfer : public KvClaim {
 public:
  ClaimedTransfer(DecodeNode* node, std::shared_ptr<PendingTransfer> pending)
      : node_(node), pending_(std::move(pending)) {}

  const KvReservation& reservation() const override {
    return pending_->reservation;
  }
  void WritePage(kv::Page page) override {
    node_->loop_.WriteTransferredPage(pending_->block_table[page.index],
                                      std::move(page));
  }
  void Fail(const absl::Status& verdict) override {
    absl::MutexLock lock(&node_->mu_);
    pending_->result = verdict;
  }
  absl::Status HandOver(KvDelivery delivery) override {
    return node_->HandOver(pending_.get(), std::move(delivery));
  }

 private:
  DecodeNode* node_;
  std::shared_ptr<PendingTransfer> pending_;
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

absl::StatusOr<int> DecodeNode::AcquireSlot(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (options_.faults.has(Fault::kMetadataSlotReuse)) {
    // The bug: the next slot round-robin, whether or not its last request
    // has consumed it.
    return static_cast<int>(next_slot_++ % slots_.size());
  }
  auto any_free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const MetadataSlot& s : slots_) {
      if (!s.in_use) return true;
    }
    return false;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&any_free), timeout)) {
    return absl::UnavailableError("no transfer metadata slot free in time");
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].in_use) {
      // stale-transfer-ref: the slot keeps what its last request left.
      if (!options_.faults.has(Fault::kStaleTransferRef)) {
        slots_[i] = MetadataSlot();
      }
      slots_[i].in_use = true;
      return static_cast<int>(i);
    }
  }
  CHECK(false) << "a free metadata slot vanished under the lock";
  return absl::InternalError("unreachable");
}

void DecodeNode::ReleaseSlot(int slot) {
  if (options_.faults.has(Fault::kMetadataSlotReuse)) return;  // never owned
  absl::MutexLock lock(&mu_);
  CHECK(slots_[slot].in_use) << "metadata slot " << slot << " released twice";
  if (options_.faults.has(Fault::kStaleTransferRef)) {
    slots_[slot].in_use = false;  // the rest stays for the next request
    return;
  }
  slots_[slot] = MetadataSlot();
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
  server_ = MakeHttpServer(options_.http_threads, options_.creds.tls);
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

std::shared_ptr<DecodeNode::PendingTransfer> DecodeNode::FindPending(
    RequestId id) {
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(id);
  return it == pending_.end() ? nullptr : it->second;
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

absl::StatusOr<std::shared_ptr<DecodeNode::PendingTransfer>>
DecodeNode::Reserve(const NodeRequest& request,
                    const std::shared_ptr<RequestChannel>& channel) {
  const RequestId id = request.id;
  const int prompt_tokens = static_cast<int>(request.prompt.size());
  RETURN_IF_ERROR(loop_.Submit(
      request.tenant, request.prompt, request.sampling,
      {id, SequenceRole::kRemotePrefill, request.cache_salt}, channel));
  // Admitted -> pages reserved (Transferring).
  auto reserved = channel->Wait(options_.transfer_timeout);
  if (!reserved.has_value()) {
    const absl::Status late =
        absl::DeadlineExceededError("no KV pages became free in time");
    loop_.Abort(id, late);
    return late;
  }
  if (reserved->kind == RequestEvent::Kind::kFinished) return reserved->status;
  CHECK(reserved->kind == RequestEvent::Kind::kReserved);
  auto slot = AcquireSlot(options_.transfer_timeout);
  if (!slot.ok()) {
    loop_.Abort(id, slot.status());
    return slot.status();
  }
  auto pending = std::make_shared<PendingTransfer>();
  pending->slot = *slot;
  pending->block_table = reserved->block_table;
  pending->reservation.request = id;
  pending->reservation.tenant = request.tenant;
  pending->reservation.prompt_tokens = prompt_tokens;
  pending->reservation.prompt_pages = loop_.pool().PagesFor(prompt_tokens);
  pending->reservation.reserved_pages =
      static_cast<int>(reserved->block_table.size());
  pending->token = NewTransferToken();
  absl::MutexLock lock(&mu_);
  pending_[id] = pending;
  return pending;
}

absl::Status DecodeNode::SettleTransfer(RequestId id, PendingTransfer& pending,
                                        absl::Status transfer,
                                        bool prefill_gone) {
  absl::MutexLock lock(&mu_);
  pending.cancelled = true;  // a receiver that has not claimed it may not now
  pending_.erase(id);
  // The receiver's verdict is the more precise one when it has one (unless
  // the prefill node went away: a transfer cut short by that is no
  // corruption).
  if (pending.claimed && pending.result.has_value() && !pending.result->ok() &&
      !prefill_gone) {
    return *pending.result;
  }
  if (pending.claimed && !pending.result.has_value() && transfer.ok()) {
    return absl::DataLossError(
        "prefill reported success before the transfer finished");
  }
  if (!pending.claimed && transfer.ok()) {
    return absl::DataLossError(
        "prefill reported success but no KV transfer arrived");
  }
  return transfer;
}

absl::Status DecodeNode::InstallFromSlot(RequestId id,
                                         const PendingTransfer& pending,
                                         absl::Status transfer) {
  if (!transfer.ok() && options_.faults.has(Fault::kStaleTransferRef)) {
    return InstallStale(id, pending, transfer);
  }
  if (!transfer.ok()) {
    ReleaseSlot(pending.slot);
    return transfer;
  }
  // The receiver left the transfer in the request's metadata slot.
  MetadataSlot taken;
  {
    absl::MutexLock lock(&mu_);
    MetadataSlot& s = slots_[pending.slot];
    // metadata-slot-reuse: whatever is in the slot now is taken as this
    // request's, without comparing the echoed id (and left there).
    if (options_.faults.has(Fault::kMetadataSlotReuse)) {
      taken = s;
    } else {
      taken = std::move(s);
      if (taken.request != id) {
        transfer = absl::DataLossError(
            absl::StrCat("metadata slot ", pending.slot, " holds request ",
                         taken.request.value(), ", not ", id.value()));
      }
    }
  }
  ReleaseSlot(pending.slot);
  if (!transfer.ok()) return transfer;
  return loop_.InstallTransferredKv(id, std::move(taken.pages),
                                    taken.computed_tokens, taken.first_token);
}

absl::Status DecodeNode::InstallStale(RequestId id,
                                      const PendingTransfer& pending,
                                      absl::Status transfer) {
  int first_token;
  {
    absl::MutexLock lock(&mu_);
    first_token = slots_[pending.slot].first_token;  // the previous request's
  }
  ReleaseSlot(pending.slot);
  // The reservation's pages are installed as computed up to the whole
  // prompt, with nothing written into them: they hold what their previous
  // occupants left. If even that cannot be installed (a slot never used,
  // a request already aborted), the failure stands.
  absl::Status installed = loop_.InstallTransferredKv(
      id, {}, pending.reservation.prompt_tokens, first_token);
  return installed.ok() ? installed : transfer;
}

void DecodeNode::StreamDecoding(http::Response& res,
                                std::shared_ptr<RequestChannel> channel,
                                RequestId id, int prompt_tokens,
                                const PrefillAnswer& prefill) {
  // Decoding: stream NDJSON lines until finished: first what the prefill
  // node reported, then the tokens, then the final line.
  nlohmann::json first_line = {{"prefill_outcome", prefill.outcome},
                               {"cached_tokens", prefill.cached_tokens}};
  if (!prefill.prompt_logprobs.is_null()) {
    first_line["prompt_logprobs"] = prefill.prompt_logprobs;
  }
  const std::string prefill_line = NdjsonLine(first_line);
  const int cached_tokens = prefill.cached_tokens;
  const nlohmann::json first_logprobs = prefill.first_logprobs;
  auto counted = std::make_shared<bool>(false);  // the final line's outcome
  res.set_chunked_content_provider(
      "application/x-ndjson",
      [this, channel, id, prompt_tokens, cached_tokens, prefill_line, counted,
       first_logprobs,
       prefill_sent = false](size_t, http::DataSink& sink) mutable {
        auto gone = [&] {
          loop_.Abort(id, absl::CancelledError("router went away"));
          return false;
        };
        if (!prefill_sent) {
          prefill_sent = true;
          if (!sink.write(prefill_line.data(), prefill_line.size())) {
            return gone();
          }
        }
        auto event = channel->Wait(absl::Milliseconds(200));
        if (!event.has_value()) return sink.is_writable() ? true : gone();
        if (event->kind != RequestEvent::Kind::kTokens &&
            event->kind != RequestEvent::Kind::kFinished) {
          return true;
        }
        const std::string text = NdjsonLine(
            EventLine(*event, prompt_tokens, cached_tokens, first_logprobs));
        if (event->kind == RequestEvent::Kind::kFinished) {
          metrics_.CountRequest(event->status);
          *counted = true;
          metrics_.CountViolations(event->violations);
        }
        if (!sink.write(text.data(), text.size())) return gone();
        if (event->kind == RequestEvent::Kind::kFinished) sink.done();
        return true;
      },
      [this, id, counted](bool success) {
        if (!success) loop_.Abort(id, absl::CancelledError("router went away"));
        // Gone before the final line: requests_total{outcome="cancelled"}.
        if (!*counted) metrics_.CountRequest(absl::CancelledError(""));
      });
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

void DecodeNode::AcceptLoop() {
  while (true) {
    auto conn = listener_->Accept(absl::Seconds(1));
    if (!conn.ok()) {
      if (conn.status().code() == absl::StatusCode::kCancelled)
        return;  // closed
      if (conn.status().code() != absl::StatusCode::kDeadlineExceeded) {
        absl::SleepFor(absl::Milliseconds(50));  // e.g. out of fds: retry
      }
      continue;
    }
    // One deadline from accept to a verified Auth, and a place among the
    // unauthenticated connections, or a refusal (answered and counted).
    const absl::Time deadline =
        absl::Now() + kv_gate_->admission().options().auth_deadline;
    std::unique_ptr<KvAdmission::Hold> hold = kv_gate_->Admit(**conn);
    if (hold == nullptr) continue;  // closed
    absl::MutexLock lock(&mu_);
    // Reap receivers that are done, so threads do not pile up.
    for (size_t i = 0; i < transfer_threads_.size();) {
      if (transfer_threads_[i].second->load()) {
        transfer_threads_[i].first.join();
        transfer_threads_[i] = std::move(transfer_threads_.back());
        transfer_threads_.pop_back();
      } else {
        ++i;
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    transfer_threads_.emplace_back(
        std::thread(
            [this, done, deadline](std::unique_ptr<kv::FrameConnection> c,
                                   std::unique_ptr<KvAdmission::Hold> h) {
              ServeTransfer(std::move(c), std::move(h), deadline);
              done->store(true);
            },
            std::move(*conn), std::move(hold)),
        done);
  }
}

void DecodeNode::ServeTransfer(std::unique_ptr<kv::FrameConnection> conn,
                               std::unique_ptr<KvAdmission::Hold> hold,
                               absl::Time deadline) {
  // The handshake, then the session's transfers one after another.
  kv_gate_->Serve(*conn, *hold, deadline,
                  [this](const absl::Status& verdict, RequestId id,
                         bool claimed, uint64_t bytes) {
                    metrics_.CountTransfer(bytes, verdict);
                    // A failed transfer fails its request here too: nothing
                    // was written into its pages, so they can go. A
                    // connection that did not claim the reservation (stray,
                    // duplicate) must not touch the request.
                    if (!verdict.ok() && claimed) loop_.Abort(id, verdict);
                  });
}

std::unique_ptr<KvClaim> DecodeNode::Claim(const kv::Metadata& meta) {
  std::shared_ptr<PendingTransfer> pending = FindPending(meta.request);
  absl::MutexLock lock(&mu_);
  if (pending == nullptr || !SameToken(pending->token, meta.transfer_token) ||
      pending->claimed || pending->cancelled) {
    return nullptr;
  }
  pending->claimed = true;
  return std::make_unique<ClaimedTransfer>(this, std::move(pending));
}

absl::Status DecodeNode::HandOver(PendingTransfer* pending,
                                  KvDelivery delivery) {
  // Hand the transfer to the request's handler through its metadata slot,
  // echoing the request id; under the same lock as the check that the
  // handler still waits (once it gave up, the slot may be another's).
  absl::MutexLock lock(&mu_);
  if (pending->cancelled) {
    pending->result = absl::CancelledError("request gave up waiting");
    return *pending->result;
  }
  MetadataSlot& slot = slots_[pending->slot];
  slot.request = delivery.request;
  slot.first_token = delivery.first_token;
  slot.computed_tokens = delivery.computed_tokens;
  slot.pages = std::move(delivery.pages);
  pending->result = absl::OkStatus();
  return absl::OkStatus();
}

}  // namespace kvcanary::engine
