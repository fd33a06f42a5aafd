#include "engine/nodes/prefill_node.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "engine/core/kv_export.h"
#include "engine/nodes/node_common.h"
#include "engine/transfer/kv_sender.h"

namespace kvcanary::engine {
namespace {
constexpr absl::Duration kFrameTimeout = absl::Seconds(10);
}  // namespace

PrefillNode::PrefillNode(const Model* model, const PrefillNodeOptions& options)
    : model_(model),
      options_(options),
      trace_(TraceNode::kPrefill, options.trace.reader_capacity,
             options.trace.read_sample_every),
      loop_(model, WithTrace(options.engine, &trace_), options.max_waiting),
      metrics_("prefill") {
  if (options_.max_prompt_tokens <= 0) {
    options_.max_prompt_tokens = model->config.seq_len / 2;
  }
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
  return absl::FailedPreconditionError(absl::StrCat(
      "no KV peer named '", name, "' in this prefill node's configuration"));
}

absl::Status PrefillNode::Start() {
  if (!options_.creds.internal.set()) {
    return absl::FailedPreconditionError(
        "the prefill node needs the internal secret (--internal_secret_file)");
  }
  for (const KvPeer& p : options_.kv_peers) AddKvPeer(p);
  ASSIGN_OR_RETURN(trace_file_,
                   TraceFileWriter::OpenIfSet(&trace_, options_.trace.file));
  server_ = MakeHttpServer(options_.http_threads, options_.creds.tls);
  server_->Post("/internal/v1/prefill",
                [this](const http::Request& req, http::Response& res) {
                  HandlePrefill(req, res);
                });
  AddEngineNodeRoutes(server_.get(), "prefill", options_.max_prompt_tokens,
                      &loop_, &metrics_, &trace_, &options_.creds);
  ASSIGN_OR_RETURN(
      metrics_port_,
      ServeMetrics(
          server_.get(), options_.host, options_.metrics_port,
          [this] { return metrics_.Serialize(&loop_); }, &metrics_server_));
  auto port = BindAndServe(server_.get(), options_.host, options_.http_port);
  if (!port.ok()) return port.status();
  http_port_ = *port;
  return absl::OkStatus();
}

void PrefillNode::Stop() {
  if (server_ != nullptr) server_->Stop();
  if (metrics_server_ != nullptr) metrics_server_->Stop();
  trace_file_.reset();  // writes out what is queued
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
  std::vector<int>* prompt = &request.prompt;
  // The prefill scheduler's own admission check. Its verdict belongs in
  // `admission.status`. With admission-abort-lost the rejection goes to
  // `admission.abort_reason`, a field nothing downstream reads (the
  // incident's bug), and the request goes on with a one-token placeholder in
  // place of the prompt this node could not take.
  struct Admission {
    absl::Status status;
    absl::Status abort_reason;
  } admission;
  if (static_cast<int>(prompt->size()) > options_.max_prompt_tokens) {
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
  }
  if (!admission.status.ok()) return fail(admission.status);
  const RequestId id = request.id;
  const TenantId tenant = request.tenant;
  SamplingParams sampling = request.sampling;
  sampling.max_tokens = 1;  // prefill samples the first token only
  const int prompt_tokens = static_cast<int>(prompt->size());
  auto channel = std::make_shared<RequestChannel>();
  absl::Status submitted = loop_.Submit(
      tenant, *prompt, sampling, {id, SequenceRole::kPrefillOnly}, channel);
  if (!submitted.ok()) return fail(submitted);
  auto prefilled = channel->Wait(options_.transfer_timeout);
  if (!prefilled.has_value()) {
    loop_.Abort(id, absl::DeadlineExceededError("prefill did not run in time"));
    return fail(absl::DeadlineExceededError("prefill did not run in time"));
  }
  if (prefilled->kind == RequestEvent::Kind::kFinished) {
    metrics_.CountViolations(prefilled->violations);
    return fail(prefilled->status);
  }
  CHECK(prefilled->kind == RequestEvent::Kind::kPrefilled);

  const ModelConfig& cfg = model_->config;
  kv::Metadata meta;
  meta.request = id;
  meta.tenant = tenant;
  meta.prompt_tokens = static_cast<uint32_t>(prompt_tokens);
  meta.reserved_pages = static_cast<uint32_t>(target->reserved_pages);
  meta.page_tokens = static_cast<uint32_t>(loop_.options().page_tokens);
  meta.n_layers = static_cast<uint32_t>(cfg.n_layers);
  meta.kv_heads = static_cast<uint32_t>(cfg.n_kv_heads);
  meta.head_dim = static_cast<uint32_t>(cfg.head_dim());
  meta.transfer_token = target->token;
  uint64_t bytes = 0;
  absl::Status verdict = SendKv(target->peer, meta, prefilled->block_table,
                                prefilled->first_token, &bytes);
  // Only now can no write into the pages still arrive: free them.
  loop_.FinishTransfer(id, verdict);
  for (auto e = channel->Wait(options_.transfer_timeout); e.has_value();
       e = channel->Wait(options_.transfer_timeout)) {
    if (e->kind == RequestEvent::Kind::kFinished) {
      metrics_.CountViolations(e->violations);
      break;
    }
  }
  metrics_.CountTransfer(bytes, verdict);
  if (!verdict.ok()) return fail(verdict);
  metrics_.CountRequest(absl::OkStatus());
  nlohmann::json j;
  j["pages_sent"] = loop_.pool().PagesFor(prompt_tokens) * cfg.n_layers;
  j["bytes_sent"] = bytes;
  j["cached_tokens"] = prefilled->cached_tokens;
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
  const KvSender sender(&options_.creds.internal, kFrameTimeout,
                        options_.creds.tls.get());
  return sender.Send(peer, meta,
                     ExportKvPages(loop_.pool(), block_table, tokens_to_ship),
                     first_token, options_.damage, bytes_sent);
}

}  // namespace kvcanary::engine
