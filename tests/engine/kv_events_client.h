// The test side of the KV cache event stream (docs/nodes.md, "KV cache
// events"): a SUB and a replay DEALER over real ZeroMQ with PLAIN
// credentials,
// and the payload decoded with msgpack-cxx directly, not with the engine's
// encoder, so the tests hold the encoder to vLLM's shapes.
#ifndef KVCANARY_TESTS_ENGINE_KV_EVENTS_CLIENT_H_
#define KVCANARY_TESTS_ENGINE_KV_EVENTS_CLIENT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <msgpack.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "gtest/gtest.h"

namespace kvcanary::testing {

inline constexpr char kKvEventsUser[] = "kvcanary";

struct DecodedEvent {
  std::string type;
  std::vector<std::string> keys;  // the map's keys, in order
  std::vector<std::string> block_hashes;
  bool has_parent_field = false;
  std::optional<std::string> parent;  // nullopt: nil
  std::vector<int64_t> token_ids;
  int64_t block_size = -1;
  bool lora_id_nil = false;
  bool lora_name_nil = false;
  std::string medium;
};

struct DecodedBatch {
  double ts = 0;
  std::vector<DecodedEvent> events;
  int64_t data_parallel_rank = -1;
};

namespace kv_events_internal {

inline std::string Str(const msgpack::object& o) {
  if (o.type != msgpack::type::STR) {
    ADD_FAILURE() << "expected a msgpack str, got type " << o.type;
    return "";
  }
  return std::string(o.via.str.ptr, o.via.str.size);
}

inline std::string Bin(const msgpack::object& o) {
  if (o.type != msgpack::type::BIN) {
    ADD_FAILURE() << "expected a msgpack bin, got type " << o.type;
    return "";
  }
  return std::string(o.via.bin.ptr, o.via.bin.size);
}

inline int64_t Int(const msgpack::object& o) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    return static_cast<int64_t>(o.via.u64);
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return o.via.i64;
  ADD_FAILURE() << "expected a msgpack int, got type " << o.type;
  return -1;
}

inline void Field(const std::string& key, const msgpack::object& v,
                  DecodedEvent* e) {
  if (key == "block_hashes" && v.type == msgpack::type::ARRAY) {
    for (uint32_t i = 0; i < v.via.array.size; ++i) {
      e->block_hashes.push_back(Bin(v.via.array.ptr[i]));
    }
  } else if (key == "parent_block_hash") {
    e->has_parent_field = true;
    if (v.type != msgpack::type::NIL) e->parent = Bin(v);
  } else if (key == "token_ids" && v.type == msgpack::type::ARRAY) {
    for (uint32_t i = 0; i < v.via.array.size; ++i) {
      e->token_ids.push_back(Int(v.via.array.ptr[i]));
    }
  } else if (key == "block_size") {
    e->block_size = Int(v);
  } else if (key == "lora_id") {
    e->lora_id_nil = v.type == msgpack::type::NIL;
  } else if (key == "lora_name") {
    e->lora_name_nil = v.type == msgpack::type::NIL;
  } else if (key == "medium") {
    e->medium = Str(v);
  } else if (key == "type") {
    e->type = Str(v);
  } else {
    ADD_FAILURE() << "unexpected field " << key;
  }
}

}  // namespace kv_events_internal

// [ts, [event map, ...], data_parallel_rank]; nullopt (and a test failure)
// on any other shape.
inline std::optional<DecodedBatch> DecodeKvEventBatch(
    const std::string& payload) {
  using namespace kv_events_internal;
  msgpack::object_handle handle =
      msgpack::unpack(payload.data(), payload.size());
  const msgpack::object& root = handle.get();
  if (root.type != msgpack::type::ARRAY || root.via.array.size != 3) {
    ADD_FAILURE() << "the batch is not a 3-element array";
    return std::nullopt;
  }
  const msgpack::object* top = root.via.array.ptr;
  if (top[0].type != msgpack::type::FLOAT64 ||
      top[1].type != msgpack::type::ARRAY) {
    ADD_FAILURE() << "want [float64 ts, [events], rank]";
    return std::nullopt;
  }
  DecodedBatch batch;
  batch.ts = top[0].via.f64;
  batch.data_parallel_rank = Int(top[2]);
  for (uint32_t i = 0; i < top[1].via.array.size; ++i) {
    const msgpack::object& ev = top[1].via.array.ptr[i];
    if (ev.type != msgpack::type::MAP) {
      ADD_FAILURE() << "event " << i << " is not a map";
      return std::nullopt;
    }
    DecodedEvent e;
    for (uint32_t k = 0; k < ev.via.map.size; ++k) {
      e.keys.push_back(Str(ev.via.map.ptr[k].key));
      Field(e.keys.back(), ev.via.map.ptr[k].val, &e);
    }
    batch.events.push_back(std::move(e));
  }
  return batch;
}

inline int64_t SeqOf(const zmq::message_t& frame) {
  if (frame.size() != 8) {
    ADD_FAILURE() << "a seq frame of " << frame.size() << " bytes";
    return -2;
  }
  uint64_t u = 0;
  for (size_t i = 0; i < 8; ++i) u = (u << 8) | frame.data<uint8_t>()[i];
  return static_cast<int64_t>(u);
}

inline std::string SeqFrame(int64_t seq) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<char>((static_cast<uint64_t>(seq) >> (56 - 8 * i)));
  }
  return out;
}

struct EventMessage {
  std::string topic;
  int64_t seq = -2;
  std::string payload;
};

// PLAIN credentials on a client socket; an empty user: none (NULL).
inline void SetCredentials(zmq::socket_t& s, const std::string& user,
                           const std::string& password) {
  s.set(zmq::sockopt::linger, 0);
  if (user.empty()) return;
  s.set(zmq::sockopt::plain_username, user);
  s.set(zmq::sockopt::plain_password, password);
}

// How a client socket's handshake with the publisher went.
enum class Handshake { kSucceeded, kFailedAuth, kFailedProtocol, kNone };

// A SUB on `endpoint` subscribed to every topic, its handshakes watched by
// a socket monitor.
class EventSubscriber {
 public:
  EventSubscriber(zmq::context_t& context, const std::string& endpoint,
                  const std::string& user, const std::string& password)
      : socket_(context, zmq::socket_type::sub),
        monitor_(context, zmq::socket_type::pair) {
    static std::atomic<int> counter{0};
    const std::string monitor_endpoint =
        "inproc://kv-events-monitor-" + std::to_string(counter++);
    if (zmq_socket_monitor(socket_.handle(), monitor_endpoint.c_str(),
                           ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0) {
      ADD_FAILURE() << "zmq_socket_monitor failed";
    }
    monitor_.set(zmq::sockopt::linger, 0);
    monitor_.connect(monitor_endpoint);
    SetCredentials(socket_, user, password);
    socket_.set(zmq::sockopt::subscribe, "");
    socket_.connect(endpoint);
  }
  ~EventSubscriber() {
    zmq_socket_monitor(socket_.handle(), nullptr, 0);
    monitor_.close();
  }
  // The next handshake outcome within `timeout_ms`; after a success, waits
  // a little more for the subscription to reach the publisher.
  Handshake WaitHandshake(int timeout_ms = 10000) {
    zmq::pollitem_t item{monitor_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) <= 0) {
      return Handshake::kNone;
    }
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(monitor_, std::back_inserter(frames)) ||
        frames.empty() || frames[0].size() < 2) {
      return Handshake::kNone;
    }
    uint16_t event;
    std::memcpy(&event, frames[0].data(), sizeof(event));
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      return Handshake::kSucceeded;
    }
    return event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
               ? Handshake::kFailedAuth
               : Handshake::kFailedProtocol;
  }
  // The next message, or nullopt after `timeout_ms`.
  std::optional<EventMessage> Receive(int timeout_ms) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) <= 0) {
      return std::nullopt;
    }
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(socket_, std::back_inserter(frames))) {
      return std::nullopt;
    }
    EXPECT_EQ(frames.size(), 3u);
    if (frames.size() != 3) return std::nullopt;
    return EventMessage{frames[0].to_string(), SeqOf(frames[1]),
                        frames[2].to_string()};
  }
  // Every message until none comes for `quiet_ms`.
  std::vector<EventMessage> Drain(int quiet_ms = 500) {
    std::vector<EventMessage> out;
    while (auto m = Receive(quiet_ms)) out.push_back(std::move(*m));
    return out;
  }

 private:
  zmq::socket_t socket_;
  zmq::socket_t monitor_;
};

// Asks the replay socket for the batches from `start` with a DEALER and
// returns them, without the end marker; a test failure if the marker does
// not come within `timeout_ms` per message. `delimited`: the request goes
// with an empty delimiter frame first, as a REQ's does (vLLM's envelope),
// and every answer must come back with one; else a bare one-frame request.
inline std::vector<EventMessage> Replay(zmq::context_t& context,
                                        const std::string& endpoint,
                                        const std::string& user,
                                        const std::string& password,
                                        int64_t start, bool delimited = true,
                                        int timeout_ms = 5000) {
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  SetCredentials(dealer, user, password);
  dealer.connect(endpoint);
  const std::string frame = SeqFrame(start);
  if (delimited) dealer.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(frame), zmq::send_flags::none);
  std::vector<EventMessage> out;
  while (true) {
    zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) <= 0) {
      ADD_FAILURE() << "no end-of-replay marker";
      return out;
    }
    std::vector<zmq::message_t> frames;
    (void)zmq::recv_multipart(dealer, std::back_inserter(frames));
    if (delimited) {
      if (frames.empty() || frames[0].size() != 0) {
        ADD_FAILURE() << "a replay answer without its empty delimiter";
        return out;
      }
      frames.erase(frames.begin());
    }
    if (frames.size() != 3) {
      ADD_FAILURE() << "a replay message of " << frames.size() << " frames";
      return out;
    }
    EventMessage m{frames[0].to_string(), SeqOf(frames[1]),
                   frames[2].to_string()};
    if (m.seq == -1) {
      EXPECT_TRUE(m.topic.empty() && m.payload.empty());
      return out;
    }
    out.push_back(std::move(m));
  }
}

}  // namespace kvcanary::testing

#endif  // KVCANARY_TESTS_ENGINE_KV_EVENTS_CLIENT_H_
