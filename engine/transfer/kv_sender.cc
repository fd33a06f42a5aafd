#include "engine/transfer/kv_sender.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/transfer/kv_connection.h"

namespace kvcanary::engine {

absl::StatusOr<KvPeer> ParseKvPeer(absl::string_view spec) {
  const size_t eq = spec.find('=');
  const size_t colon = spec.rfind(':');
  KvPeer peer;
  if (eq == absl::string_view::npos || colon == absl::string_view::npos ||
      colon < eq || eq == 0 || colon == eq + 1 ||
      !absl::SimpleAtoi(spec.substr(colon + 1), &peer.port) || peer.port <= 0 ||
      peer.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV peer '", spec, "' is not NAME=HOST:PORT"));
  }
  peer.name = std::string(spec.substr(0, eq));
  peer.host = std::string(spec.substr(eq + 1, colon - eq - 1));
  return peer;
}

namespace {

// How long a sender whose write failed still looks for the decode node's
// Abort: a receiver that refuses a page answers and closes while pages are
// still in flight, so the write fails (EPIPE, a reset) before the answer is
// read.
constexpr absl::Duration kVerdictGrace = absl::Milliseconds(500);

// Whether an Abort refused the connection before anything was claimed: the
// decode node says so with request id 0 and one of these codes only before
// it reads the Metadata (capacity, a failed or late handshake).
bool RefusedBeforeClaim(const kv::Abort& abort) {
  const auto code = static_cast<absl::StatusCode>(abort.code);
  return abort.request == RequestId(0) &&
         (code == absl::StatusCode::kResourceExhausted ||
          code == absl::StatusCode::kUnauthenticated);
}

// An Abort as the status the sender reports.
absl::Status Refused(const kv::Abort& abort, bool* before_claim) {
  *before_claim = RefusedBeforeClaim(abort);
  return absl::Status(
      static_cast<absl::StatusCode>(abort.code),
      absl::StrCat("decode node refused the transfer: ", abort.message));
}

// The decode node's answer to a whole transfer, or why there is none.
absl::Status ReadVerdict(kv::FrameConnection& c, absl::Duration timeout,
                         bool* before_claim, bool* answered) {
  auto reply = c.Receive(timeout);
  if (!reply.ok()) return reply.status();
  *answered = true;
  if (auto* ack = std::get_if<kv::Ack>(&*reply)) {
    if (ack->code == 0) return absl::OkStatus();
    return absl::Status(static_cast<absl::StatusCode>(ack->code), ack->message);
  }
  if (auto* abort = std::get_if<kv::Abort>(&*reply)) {
    return Refused(*abort, before_claim);
  }
  return absl::DataLossError("decode node answered with an unexpected frame");
}

// A failed write, explained by the decode node's Abort when one arrived.
absl::Status WriteFailed(kv::FrameConnection& c, absl::Status write_error,
                         bool* before_claim, bool* answered = nullptr) {
  if (absl::IsCancelled(write_error)) return write_error;
  auto reply = c.Receive(kVerdictGrace);
  if (reply.ok()) {
    if (answered != nullptr) *answered = true;
    if (auto* abort = std::get_if<kv::Abort>(&*reply)) {
      return Refused(*abort, before_claim);
    }
  }
  return write_error;
}

}  // namespace

KvSender::~KvSender() = default;

absl::Status KvSender::Send(const KvPeer& peer, const kv::Metadata& meta,
                            const std::vector<kv::Page>& pages, int first_token,
                            TransferDamage damage, uint64_t* bytes_sent) const {
  absl::Duration backoff = absl::Milliseconds(10);
  uint64_t total_sent = 0;
  absl::Status s;
  for (int attempt = 1;; ++attempt) {
    bool before_claim = false;
    uint64_t sent = 0;
    s = SendOnce(peer, meta, pages, first_token, damage, &sent, &before_claim);
    total_sent += sent;
    if (s.ok() || !before_claim || attempt >= send_attempts_) break;
    absl::SleepFor(backoff);  // 10, 20, 40, 80 ms
    backoff *= 2;
  }
  *bytes_sent = total_sent;
  return s;
}

namespace {

std::string PeerKey(const KvPeer& peer) {
  return absl::StrCat(peer.host, ":", peer.port);
}

}  // namespace

std::unique_ptr<kv::FrameConnection> KvSender::TakeIdle(
    const KvPeer& peer) const {
  std::vector<IdleSession> stale;  // closed after the lock is let go
  absl::MutexLock lock(&mu_);
  auto it = idle_.find(PeerKey(peer));
  if (it == idle_.end()) return nullptr;
  std::vector<IdleSession>& sessions = it->second;  // oldest first
  const absl::Time now = absl::Now();
  size_t old = 0;
  while (old < sessions.size() && now - sessions[old].since > kSessionMaxIdle) {
    ++old;
  }
  std::move(sessions.begin(), sessions.begin() + old,
            std::back_inserter(stale));
  sessions.erase(sessions.begin(), sessions.begin() + old);
  std::unique_ptr<kv::FrameConnection> found;
  while (found == nullptr && !sessions.empty()) {
    IdleSession last = std::move(sessions.back());
    sessions.pop_back();
    if (last.conn->Reusable()) {
      found = std::move(last.conn);
    } else {
      stale.push_back(std::move(last));
    }
  }
  if (sessions.empty()) idle_.erase(it);
  return found;
}

void KvSender::PutIdle(const KvPeer& peer,
                       std::unique_ptr<kv::FrameConnection> conn) const {
  absl::MutexLock lock(&mu_);
  std::vector<IdleSession>& sessions = idle_[PeerKey(peer)];
  if (static_cast<int>(sessions.size()) >= max_idle_per_peer_) {
    if (sessions.empty()) {
      idle_.erase(PeerKey(peer));
      return;  // conn closes (pooling off)
    }
    sessions.erase(sessions.begin());  // the oldest makes room
  }
  sessions.push_back(IdleSession{std::move(conn), absl::Now()});
}

absl::StatusOr<std::unique_ptr<kv::FrameConnection>> KvSender::Open(
    const KvPeer& peer, uint64_t* bytes_sent, bool* before_claim) const {
  auto conn =
      kv::FrameConnection::Connect(peer.host, peer.port, frame_timeout_, tls_);
  if (!conn.ok()) {
    // A TLS handshake the port cut short (at capacity, or its deadline).
    *before_claim = tls_ != nullptr && absl::IsUnavailable(conn.status());
    return conn.status();
  }
  opened_.fetch_add(1);
  kv::FrameConnection& c = **conn;
  auto done = [&](absl::Status s) {
    *bytes_sent += c.bytes_sent();
    return s;
  };
  // The handshake: answer the decode node's nonce under the secret.
  auto hello = c.Receive(frame_timeout_);
  if (!hello.ok()) {
    // Closed before its Hello: refused at accept.
    *before_claim = absl::IsUnavailable(hello.status());
    return done(hello.status());
  }
  if (auto* abort = std::get_if<kv::Abort>(&*hello)) {
    return done(Refused(*abort, before_claim));
  }
  const auto* h = std::get_if<kv::Hello>(&*hello);
  if (h == nullptr) {
    return done(absl::DataLossError(absl::StrCat(
        "decode node ", peer.name, " did not open the transfer with hello")));
  }
  absl::Status s = c.Send(kv::Auth{secret_->KvProof(h->nonce)}, frame_timeout_);
  if (!s.ok()) return done(WriteFailed(c, s, before_claim));
  // The Auth's bytes are counted with the transfer's: the connection's
  // counter goes on from here.
  return std::move(*conn);
}

absl::Status KvSender::SendOnce(const KvPeer& peer, const kv::Metadata& meta,
                                const std::vector<kv::Page>& pages,
                                int first_token, TransferDamage damage,
                                uint64_t* bytes_sent,
                                bool* before_claim) const {
  *bytes_sent = 0;
  std::unique_ptr<kv::FrameConnection> kept = TakeIdle(peer);
  if (kept != nullptr) {
    reused_.fetch_add(1);
    bool answered = false;
    const uint64_t before = kept->bytes_sent();
    absl::Status s = Transfer(*kept, meta, pages, first_token, damage,
                              before_claim, &answered);
    *bytes_sent += kept->bytes_sent() - before;
    if (s.ok()) {
      PutIdle(peer, std::move(kept));
      return s;
    }
    // Ended under us before any answer: the decode node closed the session
    // (idle, or restarting; a reset reads as a TLS failure, kDataLoss).
    // A verdict, a refusal or a timeout is the transfer's answer.
    if (answered || !(absl::IsUnavailable(s) || absl::IsDataLoss(s))) {
      return s;
    }
  }
  uint64_t handshake_bytes = 0;
  auto conn = Open(peer, &handshake_bytes, before_claim);
  if (!conn.ok()) {
    *bytes_sent += handshake_bytes;
    return conn.status();
  }
  bool answered = false;
  absl::Status s = Transfer(**conn, meta, pages, first_token, damage,
                            before_claim, &answered);
  *bytes_sent += (*conn)->bytes_sent();
  if (s.ok()) PutIdle(peer, std::move(*conn));
  return s;
}

absl::Status KvSender::Transfer(kv::FrameConnection& c,
                                const kv::Metadata& meta,
                                const std::vector<kv::Page>& pages,
                                int first_token, TransferDamage damage,
                                bool* before_claim, bool* answered) const {
  absl::Status s = c.Send(meta, frame_timeout_);
  if (!s.ok()) return WriteFailed(c, s, before_claim, answered);
  absl::Span<const kv::Page> rest(pages);
  if (damage != TransferDamage::kNone && !rest.empty()) {
    std::string bytes;
    kv::EncodeFrame(rest.front(), &bytes);
    if (damage == TransferDamage::kTruncateFrame) {
      s = c.SendRaw(absl::string_view(bytes).substr(0, bytes.size() / 2),
                    frame_timeout_);
      c.Shutdown();      // the stream ends mid-frame
      *answered = true;  // nothing to try again
      return absl::DataLossError("transfer truncated (test damage)");
    }
    bytes[bytes.size() / 2] ^= 0x01;  // inside the K/V bytes
    s = c.SendRaw(bytes, frame_timeout_);
    if (!s.ok()) return WriteFailed(c, s, before_claim, answered);
    rest.remove_prefix(1);
  }
  // Many page frames to a system call, each with its CRC.
  s = c.SendPages(rest, frame_timeout_);
  if (!s.ok()) return WriteFailed(c, s, before_claim, answered);
  kv::Commit commit;
  commit.request = meta.request;
  commit.pages_sent = static_cast<uint32_t>(pages.size());
  commit.tokens_sent = meta.prompt_tokens;
  commit.first_token = first_token;
  s = c.Send(commit, frame_timeout_);
  if (!s.ok()) return WriteFailed(c, s, before_claim, answered);
  return ReadVerdict(c, frame_timeout_, before_claim, answered);
}

}  // namespace kvcanary::engine
