// Who may hold what on the decode node's KV port (docs/nodes.md, "Internal
// plane"). Nothing is held before authentication: a connection that has not
// proved the secret takes no transfer slot, only a place among the
// unauthenticated connections, which are capped per peer address and in
// total and must authenticate (TLS handshake, Hello, Auth) within one short
// deadline from accept. The configured prefill nodes' addresses have a pool
// of their own, so a flood from elsewhere cannot starve them. A connection
// takes one of the transfer slots only once it has authenticated, and holds
// it for one transfer at a time: between transfers, an authenticated
// session waits for the next one in a capped place of its own (KV protocol
// version 4: a session carries any number of transfers, one after another).
#ifndef KVCANARY_ENGINE_TRANSFER_KV_ADMISSION_H_
#define KVCANARY_ENGINE_TRANSFER_KV_ADMISSION_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "engine/transfer/kv_connection.h"
#include "engine/transfer/kv_receiver.h"

namespace kvcanary::engine {

struct KvAdmissionOptions {
  // Authenticated transfers at once.
  int max_transfers = 64;
  // Unauthenticated connections at once from addresses other than the
  // prefill nodes', in total and per peer address.
  int max_unauthenticated = 64;
  int max_unauthenticated_per_peer = 4;
  // Unauthenticated connections at once from the prefill nodes' addresses
  // (beyond these they fall back to the general pool).
  int reserved_unauthenticated = 32;
  // The prefill nodes' IP addresses, as text ("127.0.0.1").
  std::vector<std::string> reserved_addresses;
  // From accept to a verified Auth: the TLS handshake, the Hello and the
  // Auth together.
  absl::Duration auth_deadline = absl::Milliseconds(200);
  // Authenticated sessions waiting between transfers, at once; a session
  // past the cap is closed after its Ack.
  int max_idle_sessions = 64;
  // How long a session may wait for its next transfer before it is closed.
  // Longer than the senders keep an idle session (KvSender::kSessionMaxIdle),
  // so a sender seldom picks one the decode node is closing.
  absl::Duration session_idle = absl::Seconds(30);
};

// The IP addresses `hosts` (names or literal addresses) resolve to, as text;
// kUnavailable naming a host that does not resolve.
absl::StatusOr<std::vector<std::string>> ResolveHosts(
    const std::vector<std::string>& hosts);

// The message of an Abort (RESOURCE_EXHAUSTED) for a connection refused for
// capacity.
inline constexpr char kKvAtCapacity[] = "the KV port is at capacity";

// The counts and caps. Thread-safe.
class KvAdmission {
 public:
  // One connection's place: unauthenticated until Authenticated(), then a
  // transfer slot. Released on destruction. Not thread-safe (one owner).
  class Hold {
   public:
    ~Hold();
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    // Moves this connection from the unauthenticated places to a transfer
    // slot; false (and holding nothing) if every slot is taken.
    bool Authenticated();
    // After a transfer: from its slot to an idle session's place; false
    // (and holding nothing) if every such place is taken.
    bool Idle();
    // An idle session's next transfer: back to a transfer slot; false (and
    // holding nothing) if every slot is taken.
    bool Resume();

   private:
    friend class KvAdmission;
    Hold(KvAdmission* admission, bool reserved, std::string peer)
        : admission_(admission), reserved_(reserved), peer_(std::move(peer)) {}
    enum class State { kUnauthenticated, kTransfer, kIdle, kNone };
    // From `from` (CHECKed) to `to` (a transfer slot or an idle place) if
    // one is free; holding nothing otherwise.
    bool Move(State from, State to);
    KvAdmission* admission_;
    bool reserved_;  // in the prefill nodes' pool
    std::string peer_;
    State state_ = State::kUnauthenticated;
  };

  explicit KvAdmission(const KvAdmissionOptions& options);

  // A place for a connection from `peer` just accepted; nullptr, and the
  // refusal's reason in *reason ("peer cap", "pre-auth cap"), if none.
  std::unique_ptr<Hold> Admit(const std::string& peer, const char** reason);
  // Unauthenticated connections held now, both pools.
  int unauthenticated() const;
  int transfers() const;
  // Authenticated sessions waiting between transfers.
  int idle_sessions() const;
  const KvAdmissionOptions& options() const { return options_; }

 private:
  void Release(Hold* hold);

  const KvAdmissionOptions options_;
  const absl::flat_hash_set<std::string> reserved_;
  mutable absl::Mutex mu_;
  int general_ ABSL_GUARDED_BY(mu_) = 0;
  int reserved_held_ ABSL_GUARDED_BY(mu_) = 0;
  int transfers_ ABSL_GUARDED_BY(mu_) = 0;
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  // General-pool places per peer address; an address leaves at zero.
  absl::flat_hash_map<std::string, int> per_peer_ ABSL_GUARDED_BY(mu_);
};

// The KV port's door: the decisions at accept and up to authentication,
// with every refusal answered (where the socket allows) and counted once by
// reason through `host`. Thread-safe; `host`, `receiver`, `tls` must
// outlive it.
class KvGate {
 public:
  KvGate(const KvAdmissionOptions& options, KvReceiverHost* host,
         const KvReceiver* receiver, const tls::Context* tls)
      : admission_(options), host_(host), receiver_(receiver), tls_(tls) {}

  // At accept (the accepting thread; quick): the connection's place, or
  // nullptr when a cap refuses it — answered with an Abort
  // (RESOURCE_EXHAUSTED, kKvAtCapacity) without TLS, closed with it.
  std::unique_ptr<KvAdmission::Hold> Admit(kv::FrameConnection& conn);
  // On the connection's own thread: the TLS handshake, the Hello and the
  // Auth by `deadline` (accept + auth_deadline), then a transfer slot. OK:
  // the caller receives the transfer. Otherwise the connection was refused
  // and answered (UNAUTHENTICATED, or RESOURCE_EXHAUSTED for capacity);
  // the caller closes it.
  absl::Status Authenticate(kv::FrameConnection& conn, KvAdmission::Hold& hold,
                            absl::Time deadline);
  const KvAdmission& admission() const { return admission_; }

  // What became of one transfer of a session: its verdict, the request
  // (once claimed), whether this session claimed it, and the bytes it took.
  using TransferDone = std::function<void(
      const absl::Status& verdict, RequestId id, bool claimed, uint64_t bytes)>;
  // A connection's whole life on its own thread: Authenticate, then its
  // transfers one after another, each with a transfer slot, each reported
  // to `done` and answered (Ack, or Abort and the end of the session);
  // between them the session waits in an idle place, at most
  // session_idle. Returns when the session ends: refused, a failed
  // transfer, the sender closed it, idle too long or no idle place, a
  // transfer refused for capacity (answered RESOURCE_EXHAUSTED, request
  // id 0, counted as "connection cap"), or ShutdownAll.
  void Serve(kv::FrameConnection& conn, KvAdmission::Hold& hold,
             absl::Time deadline, const TransferDone& done);
  // Shuts down every connection in Serve (the node is stopping): each
  // Serve returns soon after.
  void ShutdownAll();

 private:
  // The next transfer of an idle session: its first bytes, then a transfer
  // slot. False: the session ends (answered where there is something to say).
  bool AwaitNext(kv::FrameConnection& conn, KvAdmission::Hold& hold);

  KvAdmission admission_;
  KvReceiverHost* host_;
  const KvReceiver* receiver_;
  const tls::Context* tls_;
  absl::Mutex serving_mu_;
  absl::flat_hash_set<kv::FrameConnection*> serving_
      ABSL_GUARDED_BY(serving_mu_);
  bool shut_down_ ABSL_GUARDED_BY(serving_mu_) = false;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_TRANSFER_KV_ADMISSION_H_
