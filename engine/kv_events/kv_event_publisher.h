// The prefill node's KV cache event stream (docs/nodes.md, "KV cache
// events"): the prefix cache's batches, one per engine step that had any,
// on a ZMQ PUB socket in vLLM's format (kv_event_format.h), and the last
// `buffer_batches` of them again on request from a replay ROUTER socket.
//
// Replay, as vLLM's ZmqEventPublisher._service_replay (vLLM main; older
// vLLM and SGLang leave the topic frame out): a client sends an empty
// delimiter frame and the 8-byte big-endian seq to start from; the answer
// is one message per buffered batch with seq >= start, ["", topic, seq,
// payload], then the end marker ["", "", seq -1, ""]. A DEALER sends and
// sees the delimiter itself; a REQ adds and strips it, but libzmq lets a
// REQ read only the first answer, so use a DEALER. A DEALER that sends the
// seq frame alone gets the same messages without the delimiter (vLLM
// ignores such a request).
//
// Both sockets are PLAIN servers behind a ZapAuthenticator: username
// "kvcanary", the password `options.password` (the node's trace token).
// The stream carries every tenant's token ids.
//
// The engine thread only queues (Publish); the publisher thread owns the
// sockets, numbers and encodes the batches, sends them and answers
// replays. A full queue drops the batch and counts its events.
//
// Thread-safe.
#ifndef KVCANARY_ENGINE_KV_EVENTS_KV_EVENT_PUBLISHER_H_
#define KVCANARY_ENGINE_KV_EVENTS_KV_EVENT_PUBLISHER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "engine/core/kv_cache_event.h"
#include "engine/kv_events/zap_authenticator.h"
#include "engine/transfer/internal_auth.h"

namespace kvcanary::engine {

// A "tcp://HOST:PORT" endpoint.
struct TcpEndpoint {
  std::string host;
  int port = 0;  // 0: any free port
  // What zmq binds: tcp://HOST:PORT, tcp://HOST:* for port 0.
  std::string BindAddress() const;
};
// kInvalidArgument unless "tcp://HOST:PORT" with PORT in [0, 65535].
absl::StatusOr<TcpEndpoint> ParseTcpEndpoint(absl::string_view endpoint);

struct KvEventPublisherOptions {
  std::string endpoint;            // the PUB socket's, tcp://HOST:PORT
  std::string replay_endpoint;     // the replay ROUTER's; "": none
  std::string topic;               // every message's first frame
  int buffer_batches = 10000;      // kept for replay
  int hwm = 100000;                // PUB send high-water mark, as vLLM's
  int max_queue_batches = 100000;  // engine -> publisher thread
  int block_size = 16;             // tokens per page
  SharedSecret password;           // PLAIN password of user "kvcanary"
  // Tests only: every Nth batch takes its sequence number but is neither
  // sent nor kept for replay (a loss no subscriber can recover); 0: none.
  int test_lose_every = 0;
};

class KvEventPublisher final : public KvEventSink {
 public:
  explicit KvEventPublisher(KvEventPublisherOptions options);
  ~KvEventPublisher() override;  // Stop()
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Binds the sockets and starts the thread. kInvalidArgument for a bad
  // endpoint or option, kFailedPrecondition without a password,
  // kUnavailable if a port cannot be bound. Call once.
  absl::Status Start();
  // Sends what is queued, then closes the sockets. Idempotent.
  void Stop();

  // Queues a batch (the engine thread); it may come before Start().
  void Publish(KvEventBatch batch) override;

  // After Start(): the bound endpoints, tcp://HOST:PORT; "" for no replay.
  const std::string& endpoint() const { return bound_endpoint_; }
  const std::string& replay_endpoint() const { return bound_replay_; }
  // Events of batches dropped because the queue was full.
  uint64_t dropped_events() const;
  // Handshakes the ZAP handler refused.
  uint64_t refused_handshakes() const;

 private:
  struct Sent {
    int64_t seq;
    std::string payload;
  };
  // Makes `socket` a PLAIN server of `type` bound at `endpoint`; returns
  // the bound endpoint.
  absl::StatusOr<std::string> Bind(zmq::socket_t& socket, zmq::socket_type type,
                                   const std::string& endpoint, int hwm);
  void Run();
  void Send(const KvEventBatch& batch);
  // Answers every replay request waiting on the ROUTER.
  void ServiceReplay();
  void AnswerReplay(const std::vector<zmq::message_t>& request);

  const KvEventPublisherOptions options_;
  zmq::context_t context_;
  std::unique_ptr<ZapAuthenticator> zap_;
  // The publisher thread's once started.
  zmq::socket_t pub_;
  zmq::socket_t replay_;
  std::deque<Sent> sent_;  // the replay buffer, oldest first
  int64_t next_seq_ = 0;
  std::string bound_endpoint_;
  std::string bound_replay_;

  mutable absl::Mutex mu_;
  std::deque<KvEventBatch> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t dropped_events_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_KV_EVENTS_KV_EVENT_PUBLISHER_H_
