// The prefill node's side of a KV transfer (docs/kv-transfer.md): a decode
// node's KV port as configuration names it, and the sender that connects
// there, answers the handshake, and ships the Metadata, the pages and the
// Commit, then reads the decode node's verdict. The receiving side is
// KvReceiver (engine/transfer/kv_receiver.h).
#ifndef KVCANARY_ENGINE_TRANSFER_KV_SENDER_H_
#define KVCANARY_ENGINE_TRANSFER_KV_SENDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "engine/transfer/internal_auth.h"
#include "engine/transfer/kv_transfer_format.h"

namespace kvcanary::engine {

// Test-only damage to outgoing transfers, to prove the receiver's checks.
enum class TransferDamage { kNone, kFlipPageByte, kTruncateFrame };

// A decode node's KV port, as this node's configuration names it.
struct KvPeer {
  std::string name;  // what the decode node calls itself (its --name)
  std::string host;
  int port = 0;
};
// "NAME=HOST:PORT"; kInvalidArgument otherwise.
absl::StatusOr<KvPeer> ParseKvPeer(absl::string_view spec);

// One transfer per Send(). Thread-compatible; holds no connection.
class KvSender {
 public:
  // `secret` (the deployment's) and `tls` (its mutual TLS; null: plain
  // TCP) must outlive the sender.
  KvSender(const SharedSecret* secret, absl::Duration frame_timeout,
           const tls::Context* tls = nullptr)
      : secret_(secret), frame_timeout_(frame_timeout), tls_(tls) {}

  // Connects to `peer` (over mutual TLS when the sender has it), answers its
  // Hello with the proof, sends `meta`, `pages` in order (the first damaged as
  // `damage` says: tests only) and a Commit naming `first_token`, and returns
  // the decode node's verdict: OK on its Ack, its refusal otherwise, or the
  // transport's error. *bytes_sent: what went on the wire. A connection
  // refused before the decode node read its Metadata (no Hello came: the
  // port at capacity closed it; or an Abort with request id 0 and
  // RESOURCE_EXHAUSTED or UNAUTHENTICATED: the KV port at capacity, or its
  // pre-auth deadline missed under load) claimed nothing, and is tried
  // again after a short backoff, up to kSendAttempts times in all.
  absl::Status Send(const KvPeer& peer, const kv::Metadata& meta,
                    const std::vector<kv::Page>& pages, int first_token,
                    TransferDamage damage, uint64_t* bytes_sent) const;

  static constexpr int kSendAttempts = 5;

 private:
  // One try of Send; *before_claim: it was refused before the decode node
  // could claim anything (safe to try again).
  absl::Status SendOnce(const KvPeer& peer, const kv::Metadata& meta,
                        const std::vector<kv::Page>& pages, int first_token,
                        TransferDamage damage, uint64_t* bytes_sent,
                        bool* before_claim) const;

  const SharedSecret* secret_;
  absl::Duration frame_timeout_;
  const tls::Context* tls_;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_TRANSFER_KV_SENDER_H_
