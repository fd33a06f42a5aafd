// The decode node's side of a KV transfer (docs/kv-transfer.md): on one
// accepted connection, the handshake, the Metadata and its transfer token,
// every Page against the reservation (fit, once each, the stamp names the
// reservation's tenant and request), the Commit against what arrived, and
// the hand over to the request. The reservations stay the receiving node's:
// it offers them through KvReceiverHost; the sending side is KvSender
// (engine/transfer/kv_sender.h).
#ifndef KVCANARY_ENGINE_TRANSFER_KV_RECEIVER_H_
#define KVCANARY_ENGINE_TRANSFER_KV_RECEIVER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/ids.h"
#include "common/page_stamp.h"
#include "common/trace_event.h"
#include "engine/transfer/internal_auth.h"
#include "engine/transfer/kv_connection.h"
#include "engine/transfer/kv_transfer_format.h"

namespace kvcanary::engine {

// The receiving node's KV geometry: what every transfer must match.
struct KvGeometry {
  int page_tokens = 0;
  int n_layers = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;  // a Commit's first token must be below it

  // One token's K (or V) in one layer: (kv_heads, head_dim), f32.
  size_t row_bytes() const {
    return static_cast<size_t>(kv_heads) * head_dim * sizeof(float);
  }
  // The largest Page payload: one whole page of one layer.
  uint32_t max_page_payload() const {
    return static_cast<uint32_t>(kv::kPageFixedPayloadSize +
                                 2ull * page_tokens * row_bytes());
  }
  // Pages that hold `num_tokens` tokens.
  int PagesFor(int num_tokens) const {
    return (num_tokens + page_tokens - 1) / page_tokens;
  }
};

// A reservation, as a transfer is checked against it.
struct KvReservation {
  RequestId request;
  TenantId tenant;
  int prompt_tokens = 0;
  int prompt_pages = 0;    // pages the prompt's K/V fill
  int reserved_pages = 0;  // pages reserved for prompt + generation
};

// What a verified transfer delivers to its request.
struct KvDelivery {
  RequestId request;  // echoed: the request's handler compares it
  int first_token = -1;
  int computed_tokens = 0;      // prompt tokens the K/V stands for
  std::vector<kv::Page> pages;  // staged (none if written on arrival)
};

// A reservation one receiver has claimed: no other connection can claim
// it, and only this receiver settles it, with Fail or HandOver (once).
class KvClaim {
 public:
  virtual ~KvClaim() = default;
  virtual const KvReservation& reservation() const = 0;
  // Writes `page` into the reserved page now (the abort-transfer-race
  // fault only). REQUIRES: page.index < reservation().prompt_pages.
  virtual void WritePage(kv::Page page) = 0;
  // The transfer failed: `verdict` is what the request's handler learns.
  virtual void Fail(const absl::Status& verdict) = 0;
  // Leaves a verified transfer for the request's handler. Returns the
  // verdict: OK, or why it could not be left (the handler gave up).
  virtual absl::Status HandOver(KvDelivery delivery) = 0;
};

// The receiving node, as its receivers see it: its reservations, its
// metrics and its trace. Thread-safe: each connection's receiver calls it
// from its own thread.
class KvReceiverHost {
 public:
  virtual ~KvReceiverHost() = default;
  // The reservation `meta` names, claimed for this connection if its
  // transfer token matches and nobody has claimed or withdrawn it; nullptr
  // otherwise, whatever the reason (unknown id, wrong token, taken).
  virtual std::unique_ptr<KvClaim> Claim(const kv::Metadata& meta) = 0;
  // A connection refused before it claimed anything: "authentication" or
  // "no matching reservation".
  virtual void Refused(const char* reason) = 0;
  // A page whose stamp names another writer than the reservation, seen
  // under the detect or enforce watermark mode.
  virtual void Violation(const WatermarkViolation& violation) = 0;
  // The transfer_commit event of each Commit received, good or not.
  virtual void Committed(const TraceEvent& event) = 0;
};

struct KvReceiverOptions {
  // The deployment secret the sender proves it holds. Must outlive the
  // receiver.
  const SharedSecret* secret = nullptr;
  KvGeometry geometry;
  // What a page whose stamp names another writer gets: enforce refuses the
  // transfer, detect reports it and goes on, off does not look.
  WatermarkMode watermark = WatermarkMode::kEnforce;
  // How long Receive gives a connection to answer the Hello (the decode
  // node sets one deadline from accept instead: KvGate).
  absl::Duration auth_timeout = absl::Milliseconds(200);
  absl::Duration frame_timeout = absl::Seconds(10);  // each later frame
  // Faults (engine/core/faults.h, docs/faults.md), as the receiver sees
  // them. admission-abort-lost: the prompt length is taken on the
  // Metadata's word for what was sent, yet the request counts as computed
  // up to the length it reserved.
  bool trust_sent_prompt_tokens = false;
  // page-count-mismatch: the Commit is taken on the sender's word.
  bool trust_commit = false;
  // abort-transfer-race: each page is written into the reservation as it
  // arrives, and nothing stops those writes when the request is aborted.
  bool write_pages_on_arrival = false;
  // Tests only: a pause after the Metadata (to kill the node in the middle
  // of a transfer), and a slow link (bytes per second; 0: no limit).
  absl::Duration test_receive_delay = absl::ZeroDuration();
  int64_t test_receive_bytes_per_s = 0;
};

// Receives transfers, one per Receive() call. Thread-safe (it keeps no
// state of its own); `host` must outlive it.
class KvReceiver {
 public:
  KvReceiver(KvReceiverHost* host, const KvReceiverOptions& options);

  // Runs one transfer on `conn` up to its verdict, which it returns: OK
  // once the transfer is handed over; kUnauthenticated for a failed
  // handshake; kPermissionDenied, the same for every reason, when no
  // reservation matches the Metadata's request id and transfer token (that
  // reservation stays claimable); the failed check's error (or the
  // sender's Abort, or the transport's error) otherwise. Answers nothing:
  // the caller sends the Ack or Abort. *id: the request, once claimed;
  // *claimed: whether this connection took the reservation (only then may
  // a failure fail the request).
  absl::Status Receive(kv::FrameConnection& conn, RequestId* id,
                       bool* claimed) const;
  // Receive in two steps, for a caller that decides between them (the
  // decode node takes a transfer slot only once a connection has
  // authenticated). Authenticate: the Hello, then the sender's Auth by
  // `deadline`. Every failure (another first frame, a wrong proof, bytes
  // that are no frame, silence, a close) is counted once as
  // "authentication" and is the same kUnauthenticated, with no detail of
  // the parser's; kCancelled (this end shut down) is not counted.
  absl::Status Authenticate(kv::FrameConnection& conn,
                            absl::Time deadline) const;
  // After Authenticate: the rest of Receive.
  absl::Status ReceiveTransfer(kv::FrameConnection& conn, RequestId* id,
                               bool* claimed) const;
  // Each frame's deadline after the handshake (the verdict's too).
  absl::Duration frame_timeout() const { return options_.frame_timeout; }

 private:
  // What a transfer delivered so far.
  struct ReceivedKv {
    std::vector<kv::Page> pages;  // staged (unless written on arrival)
    size_t pages_received = 0;
    // Whether (index, layer) arrived: index * n_layers + layer.
    std::vector<bool> seen;
    std::vector<uint32_t> slots_per_layer;
  };

  // The claimed transfer after its Metadata: the pages up to a good
  // Commit, as they are to be handed over.
  absl::StatusOr<KvDelivery> ReceiveClaimed(kv::FrameConnection& conn,
                                            const kv::Metadata& meta,
                                            KvClaim& claim) const;
  // Tests only: the pause a link of test_receive_bytes_per_s would take
  // to carry `frame`.
  void SlowLink(const kv::Frame& frame) const;
  // The Metadata against the reservation and this node's KV geometry.
  absl::Status CheckMetadata(const kv::Metadata& meta,
                             const KvReservation& reservation) const;
  // One Page frame: fits the reservation, once, stamped as the watermark
  // mode requires; then staged (or written on arrival).
  absl::Status AcceptPage(kv::Page page, const kv::Metadata& meta,
                          KvClaim& claim, ReceivedKv* received) const;
  // The stamp names the reservation's request, or its tenant's shared
  // prefix, and covers the slots sent.
  absl::Status CheckPageStamp(const kv::Page& page,
                              const KvReservation& reservation) const;
  // The Commit against what arrived (reported as a transfer_commit event).
  absl::Status CheckCommit(const kv::Commit& commit, const kv::Metadata& meta,
                           const KvReservation& reservation,
                           const ReceivedKv& received) const;

  KvReceiverHost* host_;
  KvReceiverOptions options_;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_TRANSFER_KV_RECEIVER_H_
