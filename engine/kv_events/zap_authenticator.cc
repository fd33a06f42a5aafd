#include "engine/kv_events/zap_authenticator.h"

#include <chrono>
#include <iterator>
#include <string>
#include <zmq_addon.hpp>

#include "absl/strings/str_cat.h"
#include "engine/kv_events/zmq_frames.h"

namespace kvcanary::engine {
namespace {

constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";
constexpr char kZapVersion[] = "1.0";
constexpr std::chrono::milliseconds kPollInterval(50);

}  // namespace

absl::StatusOr<std::unique_ptr<ZapAuthenticator>> ZapAuthenticator::Start(
    zmq::context_t* context, SharedSecret password) {
  if (!password.set()) {
    return absl::FailedPreconditionError(
        "the KV event sockets need a password (the trace token)");
  }
  try {
    zmq::socket_t socket(*context, zmq::socket_type::rep);
    socket.set(zmq::sockopt::linger, 0);
    socket.bind(kZapEndpoint);
    return std::unique_ptr<ZapAuthenticator>(
        new ZapAuthenticator(std::move(socket), std::move(password)));
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind the ZAP handler: ", e.what()));
  }
}

ZapAuthenticator::ZapAuthenticator(zmq::socket_t socket, SharedSecret password)
    : socket_(std::move(socket)), password_(std::move(password)) {
  thread_ = std::thread([this] { Run(); });
}

ZapAuthenticator::~ZapAuthenticator() {
  stop_ = true;
  thread_.join();
  socket_.close();
}

void ZapAuthenticator::Run() {
  try {
    while (!stop_.load()) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, kPollInterval) <= 0) continue;
      std::vector<zmq::message_t> request;
      if (!zmq::recv_multipart(socket_, std::back_inserter(request),
                               zmq::recv_flags::dontwait)) {
        continue;
      }
      Answer(request);
    }
  } catch (const zmq::error_t&) {
    // The context is going away: nothing left to authenticate.
  }
}

bool ZapAuthenticator::Allowed(
    const std::vector<zmq::message_t>& request) const {
  // version, request id, domain, address, identity, mechanism, then the
  // mechanism's credentials: PLAIN's username and password.
  if (request.size() != 8 || FrameView(request[0]) != kZapVersion ||
      FrameView(request[5]) != "PLAIN" || FrameView(request[6]) != kUsername) {
    return false;
  }
  // SharedSecret compares "Bearer <secret>" digests in constant time.
  return password_.CheckAuthorization(
      absl::StrCat("Bearer ", FrameView(request[7])));
}

void ZapAuthenticator::Answer(const std::vector<zmq::message_t>& request) {
  const bool ok = Allowed(request);
  (ok ? accepted_ : refused_).fetch_add(1);
  const absl::string_view request_id =
      request.size() > 1 ? FrameView(request[1]) : "";
  // A REP socket must answer every request, even one it cannot read.
  SendFrames(socket_,
             {kZapVersion, request_id, ok ? "200" : "400",
              ok ? "OK" : "authentication failed", ok ? kUsername : "", ""});
}

}  // namespace kvcanary::engine
