// A KV connection's TLS transport (docs/nodes.md, "Mutual TLS"): a
// tls::Session over the connection's non-blocking socket, with deadlines.
// The handshake, and writes, reads and flushes that wait for the socket
// whichever way the session asks; every session error of the KV plane
// becomes a Status here (kUnavailable on the sending side, kDataLoss on the
// receiving side, kDeadlineExceeded at the deadline).
#ifndef KVCANARY_ENGINE_TRANSFER_KV_TLS_STREAM_H_
#define KVCANARY_ENGINE_TRANSFER_KV_TLS_STREAM_H_

#include <atomic>
#include <cstddef>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tls.h"

namespace kvcanary::engine::kv {

// Thread-safety: the session is entered under a mutex, so a sender thread
// (Write, Flush) and a receiver thread (Read) may use one stream at once:
// a session must not be entered by both at the same time.
class TlsStream {
 public:
  // Takes `session` over `fd`, the connection's non-blocking socket (not
  // owned; it outlives this stream). The session's buffers (BufferIo) are
  // set by the caller.
  TlsStream(std::unique_ptr<tls::Session> session, int fd);
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  // The handshake, by `deadline`; errors as tls::HandshakeUntil's.
  absl::Status Handshake(absl::Time deadline);
  // Through the session: bytes written (> 0); or read into `buf`, 0 once
  // the peer ended the stream. Waits for the socket as the session asks,
  // until `deadline`.
  absl::StatusOr<size_t> Write(absl::string_view bytes, absl::Time deadline);
  absl::StatusOr<size_t> Read(char* buf, size_t size, absl::Time deadline);
  // Writes out what the session's buffer holds, by `deadline`; kCancelled
  // instead of a wait or a failure once `shut_down` (the connection's
  // Shutdown) is set.
  absl::Status Flush(absl::Time deadline, const std::atomic<bool>& shut_down);
  // Bytes waiting in the session, decrypted or read ahead.
  bool HasBuffered();

 private:
  const int fd_;
  absl::Mutex mu_;
  const std::unique_ptr<tls::Session> session_ ABSL_PT_GUARDED_BY(mu_);
};

}  // namespace kvcanary::engine::kv

#endif  // KVCANARY_ENGINE_TRANSFER_KV_TLS_STREAM_H_
