#include "engine/kv_events/kv_event_publisher.h"

#include <iterator>
#include <zmq_addon.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "engine/kv_events/kv_event_format.h"
#include "engine/kv_events/zmq_frames.h"

namespace kvcanary::engine {
namespace {

// How long the publisher thread waits for a batch before it looks at the
// replay socket again.
constexpr absl::Duration kPollInterval = absl::Milliseconds(10);
// The largest message a client may send: a replay request (or the PUB's
// subscriptions) is a few bytes; anything bigger is not ours to buffer.
constexpr int64_t kMaxInboundBytes = 4096;
constexpr char kZapDomain[] = "kvcanary";

}  // namespace

std::string TcpEndpoint::BindAddress() const {
  return absl::StrCat("tcp://", host, ":",
                      port == 0 ? std::string("*") : absl::StrCat(port));
}

absl::StatusOr<TcpEndpoint> ParseTcpEndpoint(absl::string_view endpoint) {
  const auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad endpoint '", endpoint, "' (want tcp://HOST:PORT, PORT 0: any)"));
  };
  if (!absl::ConsumePrefix(&endpoint, "tcp://")) return bad();
  const size_t colon = endpoint.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return bad();
  TcpEndpoint e;
  e.host = std::string(endpoint.substr(0, colon));
  if (!absl::SimpleAtoi(endpoint.substr(colon + 1), &e.port) || e.port < 0 ||
      e.port > 65535) {
    return bad();
  }
  return e;
}

KvEventPublisher::KvEventPublisher(KvEventPublisherOptions options)
    : options_(std::move(options)) {}

KvEventPublisher::~KvEventPublisher() { Stop(); }

absl::StatusOr<std::string> KvEventPublisher::Bind(zmq::socket_t& socket,
                                                   zmq::socket_type type,
                                                   const std::string& endpoint,
                                                   int hwm) {
  ASSIGN_OR_RETURN(const TcpEndpoint parsed, ParseTcpEndpoint(endpoint));
  try {
    socket = zmq::socket_t(context_, type);
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::sndhwm, hwm);
    socket.set(zmq::sockopt::maxmsgsize, kMaxInboundBytes);
    socket.set(zmq::sockopt::plain_server, 1);
    socket.set(zmq::sockopt::zap_domain, kZapDomain);
    socket.bind(parsed.BindAddress());
    return socket.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind ", endpoint, ": ", e.what()));
  }
}

absl::Status KvEventPublisher::Start() {
  if (options_.buffer_batches < 1 || options_.hwm < 0 ||
      options_.max_queue_batches < 1 || options_.block_size < 1) {
    return absl::InvalidArgumentError(
        "KV events: the buffer, the queue and the block size must be >= 1, "
        "the high-water mark >= 0");
  }
  // The handler first: no handshake may come before it can be asked.
  ASSIGN_OR_RETURN(zap_, ZapAuthenticator::Start(&context_, options_.password));
  ASSIGN_OR_RETURN(bound_endpoint_, Bind(pub_, zmq::socket_type::pub,
                                         options_.endpoint, options_.hwm));
  if (!options_.replay_endpoint.empty()) {
    // Room for a whole replay: a ROUTER drops what is past its mark.
    ASSIGN_OR_RETURN(bound_replay_, Bind(replay_, zmq::socket_type::router,
                                         options_.replay_endpoint,
                                         options_.buffer_batches + 2));
  }
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void KvEventPublisher::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  pub_.close();
  replay_.close();
  zap_.reset();
  context_.close();
}

void KvEventPublisher::Publish(KvEventBatch batch) {
  absl::MutexLock lock(&mu_);
  if (stop_) return;
  if (static_cast<int>(queue_.size()) >= options_.max_queue_batches) {
    dropped_events_ += batch.events.size();
    return;
  }
  queue_.push_back(std::move(batch));
}

uint64_t KvEventPublisher::dropped_events() const {
  absl::MutexLock lock(&mu_);
  return dropped_events_;
}

uint64_t KvEventPublisher::refused_handshakes() const {
  return zap_ != nullptr ? zap_->refused() : 0;
}

void KvEventPublisher::Run() {
  try {
    while (true) {
      std::deque<KvEventBatch> batches;
      bool stop;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return !queue_.empty() || stop_;
        };
        mu_.AwaitWithTimeout(absl::Condition(&ready), kPollInterval);
        batches.swap(queue_);
        stop = stop_;
      }
      for (const KvEventBatch& b : batches) Send(b);
      if (stop) return;
      ServiceReplay();
    }
  } catch (const zmq::error_t&) {
    // The context is closing: nothing more can be sent.
  }
}

void KvEventPublisher::Send(const KvEventBatch& batch) {
  const int64_t seq = next_seq_++;
  if (options_.test_lose_every > 0 &&
      (seq + 1) % options_.test_lose_every == 0) {
    return;
  }
  std::string payload = EncodeKvEventBatch(batch, options_.block_size);
  // A PUB never blocks: past the high-water mark a slow subscriber misses
  // the message (and can ask for it again by its seq).
  SendFrames(pub_, {options_.topic, EncodeSeq(seq), payload});
  sent_.push_back(Sent{seq, std::move(payload)});
  while (static_cast<int>(sent_.size()) > options_.buffer_batches) {
    sent_.pop_front();
  }
}

void KvEventPublisher::ServiceReplay() {
  if (!replay_) return;
  while (true) {
    std::vector<zmq::message_t> request;
    if (!zmq::recv_multipart(replay_, std::back_inserter(request),
                             zmq::recv_flags::dontwait)) {
      return;
    }
    AnswerReplay(request);
  }
}

void KvEventPublisher::AnswerReplay(
    const std::vector<zmq::message_t>& request) {
  // [identity, "", start] from a REQ; [identity, start] from a bare DEALER.
  const bool delimited = request.size() == 3 && request[1].size() == 0;
  if (!delimited && request.size() != 2) return;
  absl::StatusOr<int64_t> start = DecodeSeq(FrameView(request.back()));
  if (!start.ok()) return;
  const absl::string_view id = FrameView(request[0]);
  const absl::string_view delimiter = "";
  // Unsigned, as vLLM reads it: a "negative" start is past every seq.
  const uint64_t from = static_cast<uint64_t>(*start);
  for (const Sent& s : sent_) {
    if (static_cast<uint64_t>(s.seq) < from) continue;
    if (delimited) {
      SendFrames(replay_,
                 {id, delimiter, options_.topic, EncodeSeq(s.seq), s.payload});
    } else {
      SendFrames(replay_, {id, options_.topic, EncodeSeq(s.seq), s.payload});
    }
  }
  if (delimited) {
    SendFrames(replay_, {id, delimiter, "", EncodeSeq(-1), ""});
  } else {
    SendFrames(replay_, {id, "", EncodeSeq(-1), ""});
  }
}

}  // namespace kvcanary::engine
