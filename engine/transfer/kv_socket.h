// The KV plane's TCP sockets (docs/kv-transfer.md): non-blocking sockets
// resolved, connected and waited on with deadlines, polling before they
// sleep. Every socket error of the KV plane is converted to an absl::Status
// once, here (SocketError): kUnavailable for a refused, reset or unreachable
// peer, kResourceExhausted when out of descriptors or memory,
// kPermissionDenied, and kInternal for the rest; a wait that passes its
// deadline is kDeadlineExceeded.
#ifndef KVCANARY_ENGINE_TRANSFER_KV_SOCKET_H_
#define KVCANARY_ENGINE_TRANSFER_KV_SOCKET_H_

#include <netdb.h>
#include <poll.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kvcanary::engine::kv {

// How long a KV socket waits for its peer by polling before it sleeps. A
// transfer waits about five times for the other side (accept, the Hello,
// the Auth and Metadata, the page stream catching up, the Ack), and each
// wake-up of a sleeping thread cost tens of microseconds here: with the
// poll, transfers of 160 pages went from about 2200 to 3300 MB/s on
// loopback (kvcanary-bench-serving, measured side by side). Costs at most
// this much CPU per wait, and yields the core to any thread that is ready.
inline constexpr absl::Duration kPollBeforeSleep = absl::Microseconds(50);

// Whether any of `fds` became ready within kPollBeforeSleep (or by
// `deadline`, if sooner), asking without sleeping and yielding the core
// between asks: the first half of every KV wait, before a sleeping poll().
bool ReadyBeforeSleep(pollfd* fds, nfds_t count, absl::Time deadline);

// A connected non-blocking TCP socket (close-on-exec, TCP_NODELAY) to
// host:port, connected by `deadline`, trying each address the host resolves
// to; the caller owns the descriptor. `kv_buffers`: the KV sockets' buffer
// sizes. Errors as FrameConnection::Connect's, with `what` in their
// messages.
absl::StatusOr<int> ConnectTcp(const std::string& host, int port,
                               absl::Time deadline, absl::string_view what,
                               bool kv_buffers);
// The Status every socket error of the KV plane becomes (errno `err`,
// `what` in the message): kUnavailable for a refused, reset or unreachable
// peer.
absl::Status SocketError(int err, absl::string_view what);
// strerror(err), thread-safe.
std::string ErrnoText(int err);

// Milliseconds for poll() until `deadline`: -1 for none, 0 once past.
int PollTimeoutMs(absl::Time deadline);
// OK once `fd` has one of `events` (or an error/hangup to report), else
// kDeadlineExceeded at `deadline`.
absl::Status WaitFor(int fd, short events, absl::Time deadline,
                     absl::string_view what);

using AddrInfoPtr = std::unique_ptr<addrinfo, void (*)(addrinfo*)>;
// The stream addresses of host:port (`passive`: to bind; host "" then means
// all interfaces). kInvalidArgument for an unknown host, kUnavailable if
// the resolver is unreachable for now.
absl::StatusOr<AddrInfoPtr> Resolve(const std::string& host, int port,
                                    bool passive);
// SO_SNDBUF and SO_RCVBUF of a KV socket, best effort; before connect or
// listen (the window scale is chosen then).
void SetBufferSizes(int fd);
// TCP_NODELAY; harmless on sockets that are not TCP.
void SetNoDelay(int fd);

}  // namespace kvcanary::engine::kv

#endif  // KVCANARY_ENGINE_TRANSFER_KV_SOCKET_H_
