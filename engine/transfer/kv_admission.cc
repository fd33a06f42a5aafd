#include "engine/transfer/kv_admission.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace kvcanary::engine {
namespace {

// How long a refusal's Abort may take to write: it is small and the socket
// new, so it goes at once or not at all.
constexpr absl::Duration kAnswerTimeout = absl::Milliseconds(50);

void Answer(kv::FrameConnection& conn, const absl::Status& refusal,
            absl::Duration timeout) {
  (void)conn.Send(kv::Abort{RequestId(0), static_cast<uint32_t>(refusal.code()),
                            std::string(refusal.message())},
                  timeout);
}

// Every transfer slot is taken: what a connection that needed one is told.
absl::Status TransfersFull(const KvAdmissionOptions& options) {
  return absl::ResourceExhaustedError(absl::StrCat(
      kKvAtCapacity, ": ", options.max_transfers, " transfers in progress"));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ResolveHosts(
    const std::vector<std::string>& hosts) {
  std::vector<std::string> out;
  for (const std::string& host : hosts) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) {
      return absl::UnavailableError(
          absl::StrCat("prefill host '", host, "' does not resolve"));
    }
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* src =
          a->ai_family == AF_INET
              ? static_cast<const void*>(
                    &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
              : static_cast<const void*>(
                    &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
      if (::inet_ntop(a->ai_family, src, text, sizeof(text)) != nullptr &&
          std::find(out.begin(), out.end(), text) == out.end()) {
        out.emplace_back(text);
      }
    }
    ::freeaddrinfo(found);
  }
  return out;
}

KvAdmission::KvAdmission(const KvAdmissionOptions& options)
    : options_(options),
      reserved_(options.reserved_addresses.begin(),
                options.reserved_addresses.end()) {
  CHECK_GT(options_.max_transfers, 0);
  CHECK_GE(options_.max_unauthenticated, 0);
  CHECK_GE(options_.max_unauthenticated_per_peer, 0);
  CHECK_GE(options_.reserved_unauthenticated, 0);
  CHECK_GE(options_.max_idle_sessions, 0);
}

std::unique_ptr<KvAdmission::Hold> KvAdmission::Admit(const std::string& peer,
                                                      const char** reason) {
  absl::MutexLock lock(&mu_);
  const bool from_prefill = reserved_.contains(peer);
  if (from_prefill && reserved_held_ < options_.reserved_unauthenticated) {
    ++reserved_held_;
    return std::unique_ptr<Hold>(new Hold(this, /*reserved=*/true, ""));
  }
  // A prefill node's address past its own pool shares the general one, but
  // no per-peer cap: the router's and the prefill nodes' traffic may all come
  // from one address.
  if (!from_prefill) {
    auto it = per_peer_.find(peer);
    const int held = it == per_peer_.end() ? 0 : it->second;
    if (held >= options_.max_unauthenticated_per_peer) {
      *reason = "peer cap";
      return nullptr;
    }
  }
  if (general_ >= options_.max_unauthenticated) {
    *reason = "pre-auth cap";
    return nullptr;
  }
  ++general_;
  if (!from_prefill) ++per_peer_[peer];
  return std::unique_ptr<Hold>(
      new Hold(this, /*reserved=*/false, from_prefill ? "" : peer));
}

bool KvAdmission::Hold::Authenticated() {
  return Move(State::kUnauthenticated, State::kTransfer);
}

bool KvAdmission::Hold::Idle() { return Move(State::kTransfer, State::kIdle); }

bool KvAdmission::Hold::Resume() {
  return Move(State::kIdle, State::kTransfer);
}

bool KvAdmission::Hold::Move(State from, State to) {
  CHECK(state_ == from);
  admission_->Release(this);  // state_ is kNone
  absl::MutexLock lock(&admission_->mu_);
  int& held =
      to == State::kTransfer ? admission_->transfers_ : admission_->idle_;
  const int cap = to == State::kTransfer
                      ? admission_->options_.max_transfers
                      : admission_->options_.max_idle_sessions;
  if (held >= cap) return false;
  ++held;
  state_ = to;
  return true;
}

KvAdmission::Hold::~Hold() { admission_->Release(this); }

void KvAdmission::Release(Hold* hold) {
  absl::MutexLock lock(&mu_);
  switch (hold->state_) {
    case Hold::State::kNone:
      return;
    case Hold::State::kTransfer:
      --transfers_;
      break;
    case Hold::State::kIdle:
      --idle_;
      break;
    case Hold::State::kUnauthenticated:
      if (hold->reserved_) {
        --reserved_held_;
        break;
      }
      --general_;
      if (!hold->peer_.empty()) {
        auto it = per_peer_.find(hold->peer_);
        CHECK(it != per_peer_.end());
        if (--it->second == 0) per_peer_.erase(it);
      }
      break;
  }
  hold->state_ = Hold::State::kNone;
}

int KvAdmission::unauthenticated() const {
  absl::MutexLock lock(&mu_);
  return general_ + reserved_held_;
}

int KvAdmission::transfers() const {
  absl::MutexLock lock(&mu_);
  return transfers_;
}

int KvAdmission::idle_sessions() const {
  absl::MutexLock lock(&mu_);
  return idle_;
}

std::unique_ptr<KvAdmission::Hold> KvGate::Admit(kv::FrameConnection& conn) {
  const char* reason = "pre-auth cap";
  std::unique_ptr<KvAdmission::Hold> hold =
      admission_.Admit(conn.PeerAddress(), &reason);
  if (hold != nullptr) return hold;
  host_->Refused(reason);
  // Without TLS the refusal can be said; under TLS nothing is said before a
  // handshake, which a refused connection does not get.
  if (tls_ == nullptr) {
    Answer(conn,
           absl::ResourceExhaustedError(absl::StrCat(
               kKvAtCapacity, " (unauthenticated connections: ", reason, ")")),
           kAnswerTimeout);
  }
  return nullptr;
}

absl::Status KvGate::Authenticate(kv::FrameConnection& conn,
                                  KvAdmission::Hold& hold,
                                  absl::Time deadline) {
  if (tls_ != nullptr) {
    const absl::Status handshake = conn.AcceptTls(
        *tls_, std::max(deadline - absl::Now(), absl::ZeroDuration()));
    if (!handshake.ok()) {
      if (!absl::IsCancelled(handshake)) host_->Refused("tls");
      return absl::UnauthenticatedError("KV connection failed TLS");
    }
  }
  // Counted by the receiver; answered here, as every refusal is.
  absl::Status auth = receiver_->Authenticate(conn, deadline);
  if (!auth.ok()) {
    Answer(conn, auth, kAnswerTimeout);
    return auth;
  }
  if (!hold.Authenticated()) {
    host_->Refused("connection cap");
    const absl::Status full = TransfersFull(admission_.options());
    Answer(conn, full, kAnswerTimeout);
    return full;
  }
  return absl::OkStatus();
}

void KvGate::Serve(kv::FrameConnection& conn, KvAdmission::Hold& hold,
                   absl::Time deadline, const TransferDone& done) {
  {
    absl::MutexLock lock(&serving_mu_);
    if (shut_down_) return;
    serving_.insert(&conn);
  }
  absl::Cleanup leave = [&] {
    absl::MutexLock lock(&serving_mu_);
    serving_.erase(&conn);
  };
  // Mutual TLS, the Hello and the Auth, then a transfer slot: a refused
  // connection was answered and counted.
  if (!Authenticate(conn, hold, deadline).ok()) return;
  for (bool first = true;; first = false) {
    if (!first && !AwaitNext(conn, hold)) return;
    RequestId id;
    bool claimed = false;
    const uint64_t before = conn.bytes_received();
    const absl::Status verdict =
        receiver_->ReceiveTransfer(conn, &id, &claimed);
    done(verdict, id, claimed, conn.bytes_received() - before);
    if (!verdict.ok()) {
      // Tell the sender why (best effort), and end the session: after a
      // failed transfer nothing says where the stream stands.
      (void)conn.Send(kv::Abort{id, static_cast<uint32_t>(verdict.code()),
                                std::string(verdict.message())},
                      receiver_->frame_timeout());
      return;
    }
    if (!conn.Send(kv::Ack{id, 0, ""}, receiver_->frame_timeout()).ok()) {
      return;
    }
  }
}

bool KvGate::AwaitNext(kv::FrameConnection& conn, KvAdmission::Hold& hold) {
  // Waiting, the session holds no transfer slot; past the idle cap it is
  // closed, which its sender sees before it picks the session again (or, in
  // a race, as a close before any answer: it tries a new connection).
  if (!hold.Idle()) return false;
  // The first bytes of the next Metadata; a close, silence past
  // session_idle or a shutdown ends the session without a word.
  if (!conn.AwaitFrame(admission_.options().session_idle).ok()) return false;
  if (!hold.Resume()) {
    host_->Refused("connection cap");
    Answer(conn, TransfersFull(admission_.options()), kAnswerTimeout);
    return false;
  }
  return true;
}

void KvGate::ShutdownAll() {
  absl::MutexLock lock(&serving_mu_);
  shut_down_ = true;
  for (kv::FrameConnection* conn : serving_) conn->Shutdown();
}

}  // namespace kvcanary::engine
