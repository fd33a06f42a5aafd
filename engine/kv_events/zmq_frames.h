// Multipart ZMQ messages from string views, for the event sockets.
#ifndef KVCANARY_ENGINE_KV_EVENTS_ZMQ_FRAMES_H_
#define KVCANARY_ENGINE_KV_EVENTS_ZMQ_FRAMES_H_

#include <initializer_list>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "absl/strings/string_view.h"

namespace kvcanary::engine {

// The bytes of a received frame.
inline absl::string_view FrameView(const zmq::message_t& frame) {
  return absl::string_view(frame.data<char>(), frame.size());
}

// Queues `frames` as one message without waiting; false if the socket
// would block (a PUB or ROUTER drops instead, so there it is always true).
// Throws zmq::error_t as cppzmq does (a closed context).
inline bool SendFrames(zmq::socket_ref socket,
                       std::initializer_list<absl::string_view> frames) {
  std::vector<zmq::const_buffer> parts;
  parts.reserve(frames.size());
  for (absl::string_view f : frames) parts.emplace_back(f.data(), f.size());
  return zmq::send_multipart(socket, parts, zmq::send_flags::dontwait)
      .has_value();
}

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_KV_EVENTS_ZMQ_FRAMES_H_
