// The prefill node's side of a KV transfer (docs/kv-transfer.md): a decode
// node's KV port as configuration names it, and the sender that connects
// there, answers the handshake, and ships the Metadata, the pages and the
// Commit, then reads the decode node's verdict. The receiving side is
// KvReceiver (engine/transfer/kv_receiver.h).
#ifndef KVCANARY_ENGINE_TRANSFER_KV_SENDER_H_
#define KVCANARY_ENGINE_TRANSFER_KV_SENDER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "engine/transfer/internal_auth.h"
#include "engine/transfer/kv_connection.h"
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

// One transfer per Send(), over a session kept from an earlier transfer to
// the same decode node when one is idle (KV protocol version 4: a session
// is authenticated once, TLS handshake included, and carries transfers one
// after another; each still presents its own reservation's transfer
// token). Thread-safe: transfers to one peer at once use sessions of their
// own.
class KvSender {
 public:
  // `secret` (the deployment's) and `tls` (its mutual TLS; null: plain
  // TCP) must outlive the sender.
  KvSender(const SharedSecret* secret, absl::Duration frame_timeout,
           const tls::Context* tls = nullptr)
      : secret_(secret), frame_timeout_(frame_timeout), tls_(tls) {}
  ~KvSender();
  KvSender(const KvSender&) = delete;
  KvSender& operator=(const KvSender&) = delete;

  // Sends `meta`, `pages` in order (the first damaged as `damage` says:
  // tests only) and a Commit naming `first_token` to `peer`, and returns
  // the decode node's verdict: OK on its Ack, its refusal otherwise, or the
  // transport's error. *bytes_sent: what went on the wire.
  //
  // The session: an idle one to `peer` when the pool has one that is
  // younger than kSessionMaxIdle and quiet; otherwise a new connection
  // (over mutual TLS when the sender has it) that answers the decode node's
  // Hello with the proof. A session goes back to the pool only after an
  // Ack. A kept session that ends before any answer (the decode node closed
  // it as idle, or restarted) is replaced by a new connection at once: the
  // decode node reads nothing of a transfer it has not answered but the
  // Metadata, and a claimed reservation cannot be claimed twice. A
  // connection refused before the decode node read its Metadata (no Hello
  // came: the port at capacity closed it; or an Abort with request id 0 and
  // RESOURCE_EXHAUSTED or UNAUTHENTICATED: the KV port at capacity, or its
  // pre-auth deadline missed under load) claimed nothing, and is tried
  // again after a short backoff (10 ms, doubling), up to send_attempts()
  // times in all.
  absl::Status Send(const KvPeer& peer, const kv::Metadata& meta,
                    const std::vector<kv::Page>& pages, int first_token,
                    TransferDamage damage, uint64_t* bytes_sent) const;

  // Idle sessions kept per peer (0: a new connection for every transfer).
  void set_max_idle_per_peer(int n) { max_idle_per_peer_ = n; }
  // Tries of a transfer refused before its claim (at least 1; default
  // kDefaultSendAttempts). Not thread-safe: set before the first Send.
  void set_send_attempts(int n) { send_attempts_ = n; }
  int send_attempts() const { return send_attempts_; }
  // Connections opened (each with a handshake), and transfers that reused
  // an idle session.
  uint64_t opened() const { return opened_.load(); }
  uint64_t reused() const { return reused_.load(); }

  static constexpr int kDefaultSendAttempts = 5;
  static constexpr int kDefaultMaxIdlePerPeer = 16;
  // An idle session older than this is closed rather than used: well under
  // the decode node's KvAdmissionOptions::session_idle (30 s).
  static constexpr absl::Duration kSessionMaxIdle = absl::Seconds(10);

 private:
  struct IdleSession {
    std::unique_ptr<kv::FrameConnection> conn;
    absl::Time since;
  };
  // One try of Send; *before_claim: it was refused before the decode node
  // could claim anything (safe to try again).
  absl::Status SendOnce(const KvPeer& peer, const kv::Metadata& meta,
                        const std::vector<kv::Page>& pages, int first_token,
                        TransferDamage damage, uint64_t* bytes_sent,
                        bool* before_claim) const;
  // One transfer on an authenticated session: Metadata, pages, Commit,
  // then the verdict. *answered: the decode node said something (a verdict
  // or a refusal) about it.
  absl::Status Transfer(kv::FrameConnection& c, const kv::Metadata& meta,
                        const std::vector<kv::Page>& pages, int first_token,
                        TransferDamage damage, bool* before_claim,
                        bool* answered) const;
  // A new connection to `peer`, through the handshake (TLS, Hello, Auth);
  // adds the bytes of a failed one to *bytes_sent.
  absl::StatusOr<std::unique_ptr<kv::FrameConnection>> Open(
      const KvPeer& peer, uint64_t* bytes_sent, bool* before_claim) const;
  // The most recently used idle session to `peer` that can still carry a
  // transfer, or null; closes the ones that cannot.
  std::unique_ptr<kv::FrameConnection> TakeIdle(const KvPeer& peer) const;
  void PutIdle(const KvPeer& peer,
               std::unique_ptr<kv::FrameConnection> conn) const;

  const SharedSecret* secret_;
  absl::Duration frame_timeout_;
  const tls::Context* tls_;
  int max_idle_per_peer_ = kDefaultMaxIdlePerPeer;
  int send_attempts_ = kDefaultSendAttempts;
  mutable absl::Mutex mu_;
  // By "host:port", oldest first.
  mutable absl::flat_hash_map<std::string, std::vector<IdleSession>> idle_
      ABSL_GUARDED_BY(mu_);
  mutable std::atomic<uint64_t> opened_{0};
  mutable std::atomic<uint64_t> reused_{0};
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_TRANSFER_KV_SENDER_H_
