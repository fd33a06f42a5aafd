// The router's keep-alive connections to its nodes (docs/nodes.md, "The
// router's connections"): HTTP/1.1 over plain TCP or mutual TLS, each
// carrying one request at a time, kept open between requests and handed to
// the next request for the same node instead of a new connection (and, over
// TLS, a new handshake) per request.
//
// A connection goes back to the pool only when its last response was read
// to its end with nothing after it, the node did not ask to close, and the
// request was not given up: a request given up while its answer is still
// coming leaves that answer on the connection, so the connection is closed
// (which also tells the node to stop). With the fault
// `cancel-reuse-channel`, a request given up after it was sent and before
// its answer's headers puts its connection back as it is: the next request
// on it reads the given-up request's answer as its own (docs/faults.md).
//
// Thread-safe.
#ifndef KVCANARY_ENGINE_NODES_NODE_POOL_H_
#define KVCANARY_ENGINE_NODES_NODE_POOL_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tls.h"

namespace kvcanary::engine {

// One connection to a node: a non-blocking socket (and its TLS session),
// and the bytes read from it that no response has consumed yet. One user
// at a time.
class NodeConnection {
 public:
  // Connects to `url` (http(s)://host:port, as ParseNodeUrl accepts it) by
  // `deadline`, with the TLS handshake when `tls` is set. kUnavailable or
  // kDeadlineExceeded naming the node.
  static absl::StatusOr<std::unique_ptr<NodeConnection>> Open(
      const std::string& url, const tls::Context* tls, absl::Time deadline);
  ~NodeConnection();  // shuts the socket down and closes it
  NodeConnection(const NodeConnection&) = delete;
  NodeConnection& operator=(const NodeConnection&) = delete;

  // Writes all of `bytes` by `deadline`. kCancelled as soon as `wake_fd`
  // (an eventfd, or -1) becomes readable.
  absl::Status Write(absl::string_view bytes, absl::Time deadline, int wake_fd);
  // Appends what the socket has to buffer(), waiting for it until
  // `deadline` (kDeadlineExceeded); returns the bytes read, 0 once the node
  // ended the stream. kCancelled as Write.
  absl::StatusOr<size_t> Read(absl::Time deadline, int wake_fd);
  // Read and not yet consumed by a response parser.
  std::string& buffer() { return buffer_; }
  // Whether an idle connection is still as it was left: nothing has
  // arrived on it and the node has not closed it.
  bool Quiet() const;
  // Whether the node closed it (a read would see the end of the stream).
  // Bytes waiting on it are not a close.
  bool ClosedByPeer() const;

  // Ends the connection for the node at once (a shutdown; the descriptor
  // stays open until the destructor). Safe from another thread while the
  // user waits on it: its wait then ends.
  void Shutdown();

  absl::Time idle_since;

 private:
  explicit NodeConnection(int fd) : fd_(fd) {}
  // Waits until `fd_` has `events` or `wake_fd` fires.
  absl::Status Wait(short events, absl::Time deadline, int wake_fd,
                    absl::string_view what);

  const int fd_;
  std::unique_ptr<tls::Session> tls_;  // null: plain TCP
  std::string buffer_;
};

struct NodePoolOptions {
  const tls::Context* tls = nullptr;  // must outlive the pool
  // Idle connections kept per node; 0: a new connection for every request
  // (and none kept).
  int max_idle_per_node = 32;
  // An idle connection older than this is closed rather than reused (well
  // under the nodes' own idle timeout, so the node never closes one just
  // as it is reused).
  absl::Duration max_idle_time = absl::Seconds(10);
  // The fault cancel-reuse-channel (see above).
  bool reuse_cancelled = false;
};

class NodePool {
 public:
  explicit NodePool(NodePoolOptions options) : options_(options) {}

  struct Lease {
    std::unique_ptr<NodeConnection> connection;
    bool reused = false;  // from the pool, not opened for this request
  };
  // An idle connection to `url` that is still quiet, or a new one
  // (connected by `deadline`).
  absl::StatusOr<Lease> Acquire(const std::string& url, absl::Time deadline);
  // Gives a connection whose response was read whole back to the pool (or
  // closes it, if the pool for `url` is full).
  void Release(const std::string& url,
               std::unique_ptr<NodeConnection> connection);
  // A request on `connection` was given up after it was sent and before
  // its answer's headers came: the connection is closed, or with the fault
  // put back as it is.
  void ReleaseCancelled(const std::string& url,
                        std::unique_ptr<NodeConnection> connection);

  bool reuse_cancelled() const { return options_.reuse_cancelled; }
  uint64_t opened() const { return opened_.load(); }
  uint64_t reused() const { return reused_.load(); }

 private:
  const NodePoolOptions options_;
  absl::Mutex mu_;
  // Most recently used last.
  std::map<std::string, std::deque<std::unique_ptr<NodeConnection>>> idle_
      ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> opened_{0};
  std::atomic<uint64_t> reused_{0};
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_NODE_POOL_H_
