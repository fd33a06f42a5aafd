// The ZAP handler (ZeroMQ RFC 27) of one ZMQ context: libzmq asks it about
// every handshake on that context's sockets that run as PLAIN servers, and
// it lets in only username "kvcanary" with the node's secret as password,
// compared in constant time (SharedSecret). Anything else (a wrong user or
// password, another mechanism) is answered 400 and libzmq drops the
// connection before a message flows. vLLM's and SGLang's event sockets have
// no such check (docs/nodes.md, "KV cache events").
//
// Thread-safe; owns its thread and its REP socket (inproc://zeromq.zap.01,
// one per context).
#ifndef KVCANARY_ENGINE_KV_EVENTS_ZAP_AUTHENTICATOR_H_
#define KVCANARY_ENGINE_KV_EVENTS_ZAP_AUTHENTICATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "absl/status/statusor.h"
#include "engine/transfer/internal_auth.h"

namespace kvcanary::engine {

class ZapAuthenticator {
 public:
  static constexpr char kUsername[] = "kvcanary";

  // Binds the handler on `context` (which must outlive it) and starts its
  // thread. kFailedPrecondition if `password` is unset; kUnavailable if
  // the context has a handler already.
  static absl::StatusOr<std::unique_ptr<ZapAuthenticator>> Start(
      zmq::context_t* context, SharedSecret password);
  ~ZapAuthenticator();  // stops the thread, closes the socket
  ZapAuthenticator(const ZapAuthenticator&) = delete;
  ZapAuthenticator& operator=(const ZapAuthenticator&) = delete;

  uint64_t accepted() const { return accepted_.load(); }
  uint64_t refused() const { return refused_.load(); }

 private:
  ZapAuthenticator(zmq::socket_t socket, SharedSecret password);
  void Run();
  // The verdict on one request's frames: true to let the peer in.
  bool Allowed(const std::vector<zmq::message_t>& request) const;
  void Answer(const std::vector<zmq::message_t>& request);

  zmq::socket_t socket_;  // the thread's once started
  const SharedSecret password_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_KV_EVENTS_ZAP_AUTHENTICATOR_H_
