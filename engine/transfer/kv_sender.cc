#include "engine/transfer/kv_sender.h"

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
                         bool* before_claim) {
  auto reply = c.Receive(timeout);
  if (!reply.ok()) return reply.status();
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
                         bool* before_claim) {
  if (absl::IsCancelled(write_error)) return write_error;
  auto reply = c.Receive(kVerdictGrace);
  if (reply.ok()) {
    if (auto* abort = std::get_if<kv::Abort>(&*reply)) {
      return Refused(*abort, before_claim);
    }
  }
  return write_error;
}

}  // namespace

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
    if (s.ok() || !before_claim || attempt == kSendAttempts) break;
    absl::SleepFor(backoff);  // 10, 20, 40, 80 ms
    backoff *= 2;
  }
  *bytes_sent = total_sent;
  return s;
}

absl::Status KvSender::SendOnce(const KvPeer& peer, const kv::Metadata& meta,
                                const std::vector<kv::Page>& pages,
                                int first_token, TransferDamage damage,
                                uint64_t* bytes_sent,
                                bool* before_claim) const {
  *bytes_sent = 0;
  auto conn =
      kv::FrameConnection::Connect(peer.host, peer.port, frame_timeout_, tls_);
  if (!conn.ok()) {
    // A TLS handshake the port cut short (at capacity, or its deadline).
    *before_claim = tls_ != nullptr && absl::IsUnavailable(conn.status());
    return conn.status();
  }
  kv::FrameConnection& c = **conn;
  auto done = [&](absl::Status s) {
    *bytes_sent = c.bytes_sent();
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
  s = c.Send(meta, frame_timeout_);
  if (!s.ok()) return done(WriteFailed(c, s, before_claim));
  absl::Span<const kv::Page> rest(pages);
  if (damage != TransferDamage::kNone && !rest.empty()) {
    std::string bytes;
    kv::EncodeFrame(rest.front(), &bytes);
    if (damage == TransferDamage::kTruncateFrame) {
      s = c.SendRaw(absl::string_view(bytes).substr(0, bytes.size() / 2),
                    frame_timeout_);
      c.Shutdown();  // the stream ends mid-frame
      return done(absl::DataLossError("transfer truncated (test damage)"));
    }
    bytes[bytes.size() / 2] ^= 0x01;  // inside the K/V bytes
    s = c.SendRaw(bytes, frame_timeout_);
    if (!s.ok()) return done(WriteFailed(c, s, before_claim));
    rest.remove_prefix(1);
  }
  // Many page frames to a system call, each with its CRC.
  s = c.SendPages(rest, frame_timeout_);
  if (!s.ok()) return done(WriteFailed(c, s, before_claim));
  kv::Commit commit;
  commit.request = meta.request;
  commit.pages_sent = static_cast<uint32_t>(pages.size());
  commit.tokens_sent = meta.prompt_tokens;
  commit.first_token = first_token;
  s = c.Send(commit, frame_timeout_);
  if (!s.ok()) return done(WriteFailed(c, s, before_claim));
  return done(ReadVerdict(c, frame_timeout_, before_claim));
}

}  // namespace kvcanary::engine
