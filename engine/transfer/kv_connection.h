// Frames over TCP (docs/kv-transfer.md): a connection that sends and receives
// whole kv::Frames with deadlines, and a listener that accepts them. Their
// errors (socket errors as kv_socket.h converts them):
//   kDeadlineExceeded  the timeout passed (the stream is still in sync if
//                      nothing of the frame was written or read yet)
//   kUnavailable       the peer is unreachable, closed at a frame boundary,
//                      or reset the connection
//   kDataLoss          the stream ended mid-frame or a frame is corrupt
//   kCancelled         Shutdown()/Close() was called on this end
//
// With mutual TLS (common/tls.h) the frames travel inside a TLS session
// (kv_tls_stream.h): Connect() takes the deployment's context and completes
// the handshake within its timeout; an accepted connection runs AcceptTls()
// before its first frame.
#ifndef KVCANARY_ENGINE_TRANSFER_KV_CONNECTION_H_
#define KVCANARY_ENGINE_TRANSFER_KV_CONNECTION_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/tls.h"
#include "engine/transfer/kv_tls_stream.h"
#include "engine/transfer/kv_transfer_format.h"

namespace kvcanary::engine::kv {

// One TCP connection carrying frames, blocking with per-call timeouts.
//
// Thread-safety: one sender thread (Send) and one receiver thread (Receive)
// may use a connection concurrently; two threads must not Send (or Receive)
// at once. Shutdown() and the byte counters are safe from any thread. The
// destructor closes the socket: no thread may be inside Send/Receive then.
class FrameConnection {
 public:
  // Connects to host:port within `timeout` (TCP_NODELAY on), and with `tls`
  // also completes the TLS handshake within it (the server's certificate
  // must name `host`). kUnavailable if refused or unreachable or the
  // handshake fails, kDeadlineExceeded on timeout, kInvalidArgument for a bad
  // port or an unknown host.
  static absl::StatusOr<std::unique_ptr<FrameConnection>> Connect(
      const std::string& host, int port, absl::Duration timeout,
      const tls::Context* tls = nullptr);
  // Takes ownership of a connected stream socket (made non-blocking here;
  // TCP_NODELAY where it applies). REQUIRES: fd >= 0.
  static std::unique_ptr<FrameConnection> FromFd(int fd);

  ~FrameConnection();
  FrameConnection(const FrameConnection&) = delete;

  // The accepting end's TLS handshake, requiring a client certificate from
  // the deployment CA, within `timeout`; errors as HandshakeUntil's. Before
  // any Send or Receive; at most once.
  absl::Status AcceptTls(const tls::Context& ctx, absl::Duration timeout);
  bool uses_tls() const { return tls_ != nullptr; }
  // The peer's IP address as text ("127.0.0.2"; an IPv4-mapped IPv6
  // address as IPv4); "" if the socket has none.
  std::string PeerAddress() const;
  FrameConnection& operator=(const FrameConnection&) = delete;

  // Writes one whole frame. A failure after part of the frame was written
  // leaves the stream out of sync, so every later Send returns that error.
  absl::Status Send(const Frame& frame, absl::Duration timeout);
  // Writes `pages` as Page frames, in order, many to a system call: each
  // batch (about 256 KiB) is gathered, its pages' CRCs computed as it is,
  // and written with one sendmsg of the frames' heads and CRCs and the
  // pages' kv_bytes where they lie (over TLS, the batch encoded into one
  // buffer for the session). Each frame must be written within `timeout`
  // of the one before it (the first, of the call). Errors as Send's; a
  // failure after the first byte of the call leaves the stream failed.
  absl::Status SendPages(absl::Span<const Page> pages, absl::Duration timeout);
  // Writes `bytes` as they are, with Send's errors: for fault injection and
  // tests that need a damaged or partial frame on the wire.
  absl::Status SendRaw(absl::string_view bytes, absl::Duration timeout);
  // The next frame. kDeadlineExceeded is retryable (bytes read so far stay
  // buffered); any other error is final and returned by every later call.
  absl::StatusOr<Frame> Receive(absl::Duration timeout);
  // Receiver thread: waits until bytes of a next frame are in (OK; Receive
  // then reads it), for a session between transfers. kUnavailable if the
  // peer closed the connection at the frame boundary, kDeadlineExceeded
  // (retryable) on timeout, kCancelled after Shutdown; other errors final.
  absl::Status AwaitFrame(absl::Duration timeout);
  // Whether the connection can carry another conversation now: no error
  // on either side, not shut down, nothing buffered or readable (a peer
  // that closed, reset or said anything makes it unusable). Neither Send
  // nor Receive may run meanwhile (the sender's idle pool asks it).
  bool Reusable();
  // Unblocks Send and Receive (they return kCancelled) and ends the
  // connection for the peer. Idempotent.
  void Shutdown();

  // Receiver thread only: Page frames over `max` payload bytes are refused
  // from their header, before they are buffered (kDataLoss).
  void set_max_page_payload(uint32_t max) {
    decoder_.set_max_page_payload(max);
  }

  uint64_t bytes_sent() const { return bytes_sent_.load(); }
  uint64_t bytes_received() const { return bytes_received_.load(); }

 private:
  explicit FrameConnection(int fd);
  // Writes `pieces` in order, as few system calls as the socket allows (over
  // TLS: one piece, the session's writes). The frames in them end at the
  // byte offsets `frame_ends` (ascending; the last is the total); each must
  // be written within `timeout` of the one before it. `what` names them in
  // errors.
  absl::Status WritePieces(absl::Span<const absl::string_view> pieces,
                           absl::Span<const size_t> frame_ends,
                           absl::Duration timeout, absl::string_view what);
  // Bytes written from the start of `pieces` (> 0), waiting for the socket
  // until `deadline`.
  absl::StatusOr<size_t> WriteSome(absl::Span<const absl::string_view> pieces,
                                   absl::Time deadline);
  // The next batch of `pages` into gather_pieces_ and gather_frame_ends_;
  // returns how many pages it holds (at least one).
  size_t GatherPages(absl::Span<const Page> pages);
  // Reads what the socket has (up to kReadBytes) into the decoder: the
  // bytes read, 0 once the peer ended the stream.
  absl::StatusOr<size_t> ReadSome(absl::Time deadline);
  absl::Status ReceiveFailed(absl::Status status);

  const int fd_;
  // Set before the first frame; then used by both threads (it serializes
  // their entries into the session).
  std::unique_ptr<TlsStream> tls_;
  std::atomic<bool> shut_down_{false};
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
  // Sender thread only.
  std::string send_buffer_;  // an encoded frame, or a batch over TLS
  std::string gather_ends_;  // a batch's frame heads and CRCs, in order
  std::vector<absl::string_view> gather_pieces_;
  std::vector<size_t> gather_frame_ends_;
  absl::Status send_failed_;
  // Receiver thread only: reads go straight into the decoder's buffer.
  FrameDecoder decoder_;
  absl::Status receive_failed_;
};

// A listening TCP socket. Thread-safety: one thread calls Accept; Close()
// and port() are safe from any thread. The destructor closes the socket: no
// thread may be inside Accept then.
class FrameListener {
 public:
  // Binds host:port (port 0: any free port; host "" or "0.0.0.0": all
  // interfaces) and listens. kUnavailable if the address is in use.
  static absl::StatusOr<std::unique_ptr<FrameListener>> Listen(
      const std::string& host, int port);
  // Adopts `fd`, a listening TCP socket another process bound (`up` binds
  // the KV port once and hands it to every decode process it starts, so no
  // other process can take the port between a pick and a bind, nor during
  // a restart). kInvalidArgument if `fd` is not a listening socket.
  static absl::StatusOr<std::unique_ptr<FrameListener>> FromFd(int fd);

  ~FrameListener();
  FrameListener(const FrameListener&) = delete;
  FrameListener& operator=(const FrameListener&) = delete;

  int port() const { return port_; }
  // The listening socket (close-on-exec; owned by this listener).
  int fd() const { return fd_; }
  // The next connection; kDeadlineExceeded on timeout, kCancelled once
  // Close() has been called.
  absl::StatusOr<std::unique_ptr<FrameConnection>> Accept(
      absl::Duration timeout);
  // Stops listening and unblocks Accept. Idempotent.
  void Close();

 private:
  FrameListener(int fd, int port, int wake_fd)
      : fd_(fd), port_(port), wake_fd_(wake_fd) {}
  static absl::StatusOr<std::unique_ptr<FrameListener>> Adopt(int fd);

  const int fd_;
  const int port_;
  // An eventfd Close() signals to wake Accept. (Not shutdown() of the
  // socket: an adopted one is shared with the process that bound it, and
  // must go on listening for the next process it is handed to.)
  const int wake_fd_;
  std::atomic<bool> closed_{false};
};

}  // namespace kvcanary::engine::kv

#endif  // KVCANARY_ENGINE_TRANSFER_KV_CONNECTION_H_
