#include "engine/transfer/kv_receiver.h"

#include <algorithm>
#include <optional>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/check.h"
#include "common/status_macros.h"

namespace kvcanary::engine {

KvReceiver::KvReceiver(KvReceiverHost* host, const KvReceiverOptions& options)
    : host_(host), options_(options) {
  CHECK(host_ != nullptr);
  CHECK(options_.secret != nullptr);
  CHECK_GT(options_.geometry.page_tokens, 0);
}

absl::Status KvReceiver::Receive(kv::FrameConnection& conn, RequestId* id,
                                 bool* claimed) const {
  RETURN_IF_ERROR(Authenticate(conn, absl::Now() + options_.auth_timeout));
  return ReceiveTransfer(conn, id, claimed);
}

absl::Status KvReceiver::ReceiveTransfer(kv::FrameConnection& conn,
                                         RequestId* id, bool* claimed) const {
  auto first = conn.Receive(options_.frame_timeout);
  if (!first.ok()) return first.status();
  const auto* meta = std::get_if<kv::Metadata>(&*first);
  if (meta == nullptr)
    return absl::DataLossError("transfer did not start with metadata");
  if (options_.test_receive_delay > absl::ZeroDuration()) {
    absl::SleepFor(options_.test_receive_delay);
  }
  // One answer for every refusal (unknown id, wrong token, taken), so a
  // refusal reveals nothing; the reservation is left as it was.
  std::unique_ptr<KvClaim> claim = host_->Claim(*meta);
  if (claim == nullptr) {
    host_->Refused("no matching reservation");
    return absl::PermissionDeniedError(
        "no reservation matches this request id and transfer token");
  }
  *id = meta->request;
  *claimed = true;
  absl::StatusOr<KvDelivery> delivery = ReceiveClaimed(conn, *meta, *claim);
  if (!delivery.ok()) {
    claim->Fail(delivery.status());
    return delivery.status();
  }
  return claim->HandOver(*std::move(delivery));
}

absl::Status KvReceiver::Authenticate(kv::FrameConnection& conn,
                                      absl::Time deadline) const {
  // Nothing larger than one page of this geometry is buffered.
  conn.set_max_page_payload(options_.geometry.max_page_payload());
  auto left = [deadline] {
    return std::max(deadline - absl::Now(), absl::ZeroDuration());
  };
  const SharedSecret::Nonce nonce = SharedSecret::NewNonce();
  const absl::Status sent = conn.Send(kv::Hello{nonce}, left());
  absl::StatusOr<kv::Frame> first =
      sent.ok() ? conn.Receive(left()) : absl::StatusOr<kv::Frame>(sent);
  if (!first.ok() && absl::IsCancelled(first.status())) return first.status();
  const kv::Auth* auth = first.ok() ? std::get_if<kv::Auth>(&*first) : nullptr;
  if (auth == nullptr || !options_.secret->CheckKvProof(nonce, auth->proof)) {
    host_->Refused("authentication");
    return absl::UnauthenticatedError("KV connection failed authentication");
  }
  return absl::OkStatus();
}

absl::StatusOr<KvDelivery> KvReceiver::ReceiveClaimed(kv::FrameConnection& conn,
                                                      const kv::Metadata& meta,
                                                      KvClaim& claim) const {
  const KvReservation& reservation = claim.reservation();
  RETURN_IF_ERROR(CheckMetadata(meta, reservation));
  ReceivedKv received;
  received.slots_per_layer.assign(options_.geometry.n_layers, 0);
  // At most one page per (prompt page, layer) is accepted.
  const size_t max_pages = static_cast<size_t>(reservation.prompt_pages) *
                           options_.geometry.n_layers;
  received.seen.assign(max_pages, false);
  if (!options_.write_pages_on_arrival) received.pages.reserve(max_pages);
  while (true) {
    auto frame = conn.Receive(options_.frame_timeout);
    if (!frame.ok()) return frame.status();
    if (options_.test_receive_bytes_per_s > 0) SlowLink(*frame);
    if (auto* abort = std::get_if<kv::Abort>(&*frame)) {
      return absl::Status(
          static_cast<absl::StatusCode>(abort->code),
          absl::StrCat("prefill node aborted: ", abort->message));
    }
    if (auto* page = std::get_if<kv::Page>(&*frame)) {
      RETURN_IF_ERROR(AcceptPage(std::move(*page), meta, claim, &received));
      continue;
    }
    auto* commit = std::get_if<kv::Commit>(&*frame);
    if (commit == nullptr)
      return absl::DataLossError("unexpected frame in transfer");
    RETURN_IF_ERROR(CheckCommit(*commit, meta, reservation, received));
    KvDelivery delivery;
    delivery.request = meta.request;
    delivery.first_token = commit->first_token;
    // With admission-abort-lost the request is computed up to the prompt
    // length it reserved for: attention reads every reserved prompt page.
    delivery.computed_tokens = options_.trust_sent_prompt_tokens
                                   ? reservation.prompt_tokens
                                   : static_cast<int>(meta.prompt_tokens);
    delivery.pages = std::move(received.pages);
    return delivery;
  }
}

void KvReceiver::SlowLink(const kv::Frame& frame) const {
  // Each frame takes its own size over the rate (a page's bytes are what
  // weigh), however many of them one read brought in.
  const auto* page = std::get_if<kv::Page>(&frame);
  const size_t bytes =
      kv::kFrameHeaderSize +
      (page == nullptr ? 0 : kv::kPageFixedPayloadSize + page->kv_bytes.size());
  absl::SleepFor(
      absl::Seconds(static_cast<double>(bytes) /
                    static_cast<double>(options_.test_receive_bytes_per_s)));
}

absl::Status KvReceiver::CheckMetadata(const kv::Metadata& meta,
                                       const KvReservation& reservation) const {
  const KvGeometry& g = options_.geometry;
  // admission-abort-lost: the transfer's word for how much was sent is
  // taken, yet the reservation is still believed for what the prompt is.
  const bool trust_sent = options_.trust_sent_prompt_tokens;
  if (meta.tenant != reservation.tenant ||
      (!trust_sent && meta.prompt_tokens !=
                          static_cast<uint32_t>(reservation.prompt_tokens)) ||
      meta.reserved_pages !=
          static_cast<uint32_t>(reservation.reserved_pages)) {
    return absl::DataLossError(absl::StrCat(
        "transfer metadata disagrees with the reservation: tenant ",
        meta.tenant.value(), " vs ", reservation.tenant.value(),
        ", prompt tokens ", meta.prompt_tokens, " vs ",
        reservation.prompt_tokens, ", reserved pages ", meta.reserved_pages,
        " vs ", reservation.reserved_pages));
  }
  if (meta.page_tokens != static_cast<uint32_t>(g.page_tokens) ||
      meta.n_layers != static_cast<uint32_t>(g.n_layers) ||
      meta.kv_heads != static_cast<uint32_t>(g.kv_heads) ||
      meta.head_dim != static_cast<uint32_t>(g.head_dim)) {
    return absl::FailedPreconditionError(
        "KV geometry differs between the nodes");
  }
  return absl::OkStatus();
}

absl::Status KvReceiver::AcceptPage(kv::Page page, const kv::Metadata& meta,
                                    KvClaim& claim,
                                    ReceivedKv* received) const {
  const KvGeometry& g = options_.geometry;
  const KvReservation& reservation = claim.reservation();
  const uint32_t prompt_pages = static_cast<uint32_t>(reservation.prompt_pages);
  // Each page carries exactly the prompt's slots in it: no holes.
  const uint32_t pt = static_cast<uint32_t>(g.page_tokens);
  const uint32_t want_slots =
      page.index < prompt_pages
          ? std::min(pt, meta.prompt_tokens - page.index * pt)
          : 0;
  const uint32_t layers = static_cast<uint32_t>(g.n_layers);
  if (page.index >= prompt_pages || page.layer >= layers ||
      page.slots != want_slots ||
      page.kv_bytes.size() != 2 * page.slots * g.row_bytes() ||
      received->seen[size_t{page.index} * layers + page.layer]) {
    return absl::DataLossError(
        absl::StrCat("page ", page.index, " layer ", page.layer, " (",
                     page.slots, " slots) does not fit the reservation"));
  }
  received->seen[size_t{page.index} * layers + page.layer] = true;
  RETURN_IF_ERROR(CheckPageStamp(page, reservation));
  received->slots_per_layer[page.layer] += page.slots;
  ++received->pages_received;
  if (options_.write_pages_on_arrival) {
    claim.WritePage(std::move(page));
  } else {
    received->pages.push_back(std::move(page));
  }
  return absl::OkStatus();
}

absl::Status KvReceiver::CheckPageStamp(
    const kv::Page& page, const KvReservation& reservation) const {
  // The stamp says who wrote these bytes: this request, or its tenant's
  // shared prefix. Anything else is a watermark violation of the transfer,
  // handled as the mode says: enforce refuses the transfer, detect reports
  // it and goes on (attention on the decode node flags the reads too), off
  // does not look. A frame with more slots than its stamp says were filled
  // is malformed in any mode.
  const StampIdentity& w = page.stamp.writer;
  std::optional<ViolationKind> kind;
  if (w.tenant != reservation.tenant) {
    kind = w.tenant == kNoTenant ? ViolationKind::kUnwrittenRead
                                 : ViolationKind::kForeignTenantRead;
  } else if (w.request != reservation.request && !page.stamp.shared()) {
    kind = ViolationKind::kStaleRequestRead;
  }
  const WatermarkMode mode = options_.watermark;
  if (kind.has_value() && mode != WatermarkMode::kOff) {
    WatermarkViolation v;
    v.kind = *kind;
    v.layer = page.layer;
    v.page = page.stamp.page;  // the prefill node's page
    v.slots_read = page.slots;
    v.reader = StampIdentity{reservation.request, reservation.tenant,
                             page.stamp.owner.generation};
    v.writer = w;
    v.writer_shared = page.stamp.shared();
    v.owner = page.stamp.owner;
    v.filled = page.stamp.filled;
    host_->Violation(v);
  }
  if ((kind.has_value() && mode == WatermarkMode::kEnforce) ||
      page.stamp.filled < page.slots) {
    return absl::DataLossError(absl::StrCat(
        "page ", page.index, " layer ", page.layer, " is stamped by tenant ",
        w.tenant.value(), " request ", w.request.value(), " (filled ",
        page.stamp.filled, "), not by this request"));
  }
  return absl::OkStatus();
}

absl::Status KvReceiver::CheckCommit(const kv::Commit& commit,
                                     const kv::Metadata& meta,
                                     const KvReservation& reservation,
                                     const ReceivedKv& received) const {
  const KvGeometry& g = options_.geometry;
  const uint32_t expected_pages = static_cast<uint32_t>(
      (options_.trust_sent_prompt_tokens
           ? g.PagesFor(static_cast<int>(meta.prompt_tokens))
           : reservation.prompt_pages) *
      g.n_layers);
  bool tokens_ok = commit.tokens_sent == meta.prompt_tokens;
  for (uint32_t s : received.slots_per_layer)
    tokens_ok = tokens_ok && s == meta.prompt_tokens;
  TraceEvent e;
  e.type = TraceEventType::kTransferCommit;
  e.request = meta.request;
  e.tenant = meta.tenant;
  e.pages_sent = static_cast<uint32_t>(received.pages_received);
  // What the reservation expects, whatever a fault made this node accept.
  const uint32_t reserved_pages =
      static_cast<uint32_t>(reservation.prompt_pages * g.n_layers);
  e.pages_expected = reserved_pages;
  e.tokens_sent = commit.tokens_sent;
  e.tokens_expected = static_cast<uint32_t>(reservation.prompt_tokens);
  e.ok = received.pages_received == reserved_pages &&
         commit.pages_sent == received.pages_received &&
         commit.tokens_sent == e.tokens_expected &&
         received.slots_per_layer[0] == e.tokens_expected;
  host_->Committed(e);
  // page-count-mismatch: the commit is taken on the sender's word.
  const bool compare = !options_.trust_commit;
  if (commit.request != meta.request ||
      (compare && (commit.pages_sent != received.pages_received ||
                   received.pages_received != expected_pages || !tokens_ok)) ||
      commit.first_token < 0 || commit.first_token >= g.vocab_size) {
    return absl::DataLossError(absl::StrCat(
        "commit mismatch: pages sent ", commit.pages_sent, ", received ",
        received.pages_received, ", expected ", expected_pages,
        "; tokens sent ", commit.tokens_sent, ", expected ", meta.prompt_tokens,
        "; first token ", commit.first_token));
  }
  return absl::OkStatus();
}

}  // namespace kvcanary::engine
