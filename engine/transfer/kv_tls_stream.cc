// A KV connection's TLS transport: the session's handshake, writes, reads
// and flushes, waiting for the socket with deadlines.
#include "engine/transfer/kv_tls_stream.h"

#include <poll.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/transfer/kv_socket.h"

namespace kvcanary::engine::kv {

TlsStream::TlsStream(std::unique_ptr<tls::Session> session, int fd)
    : fd_(fd), session_(std::move(session)) {}

absl::Status TlsStream::Handshake(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return tls::HandshakeUntil(*session_, fd_, deadline);
}

absl::StatusOr<size_t> TlsStream::Write(absl::string_view bytes,
                                        absl::Time deadline) {
  while (true) {
    size_t n = 0;
    tls::Io io;
    std::string error;
    {
      absl::MutexLock lock(&mu_);
      io = session_->Write(bytes.data(), bytes.size(), &n);
      if (io == tls::Io::kFailed) error = session_->error();
    }
    switch (io) {
      case tls::Io::kOk:
        return n;
      case tls::Io::kWantRead:
        RETURN_IF_ERROR(WaitFor(fd_, POLLIN, deadline, "kv send"));
        continue;
      case tls::Io::kWantWrite:
        RETURN_IF_ERROR(WaitFor(fd_, POLLOUT, deadline, "kv send"));
        continue;
      case tls::Io::kClosed:
        return absl::UnavailableError("kv send: the peer closed the session");
      case tls::Io::kFailed:
        return absl::UnavailableError(absl::StrCat("kv send: TLS: ", error));
    }
  }
}

absl::Status TlsStream::Flush(absl::Time deadline,
                              const std::atomic<bool>& shut_down) {
  while (true) {
    tls::Io io;
    std::string error;
    {
      absl::MutexLock lock(&mu_);
      io = session_->Flush();
      if (io == tls::Io::kFailed) error = session_->error();
    }
    switch (io) {
      case tls::Io::kOk:
        return absl::OkStatus();
      case tls::Io::kWantWrite:
        if (shut_down.load()) {
          return absl::CancelledError("kv send: connection shut down");
        }
        RETURN_IF_ERROR(WaitFor(fd_, POLLOUT, deadline, "kv send"));
        continue;
      default:
        if (shut_down.load()) {
          return absl::CancelledError("kv send: connection shut down");
        }
        return absl::UnavailableError(absl::StrCat("kv send: TLS: ", error));
    }
  }
}

absl::StatusOr<size_t> TlsStream::Read(char* buf, size_t size,
                                       absl::Time deadline) {
  while (true) {
    size_t n = 0;
    tls::Io io;
    std::string error;
    {
      absl::MutexLock lock(&mu_);
      io = session_->Read(buf, size, &n);
      if (io == tls::Io::kFailed) error = session_->error();
    }
    switch (io) {
      case tls::Io::kOk:
        return n;
      case tls::Io::kClosed:
        return 0;
      case tls::Io::kWantRead:
        RETURN_IF_ERROR(WaitFor(fd_, POLLIN, deadline, "kv receive"));
        continue;
      case tls::Io::kWantWrite:
        RETURN_IF_ERROR(WaitFor(fd_, POLLOUT, deadline, "kv receive"));
        continue;
      case tls::Io::kFailed:
        return absl::DataLossError(absl::StrCat("kv receive: TLS: ", error));
    }
  }
}

bool TlsStream::HasBuffered() {
  absl::MutexLock lock(&mu_);
  return session_->HasBuffered();
}

}  // namespace kvcanary::engine::kv
