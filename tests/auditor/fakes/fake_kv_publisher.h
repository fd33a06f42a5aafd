// A scripted KV-cache event publisher for the auditor's tests: vLLM's
// framing (topic, 8-byte big-endian sequence, msgpack batch) on a real ZMQ
// PUB socket, and its replay ROUTER, with the edge cases a real stream
// has: messages dropped past a high-water mark, a replay buffer that no
// longer holds them, a publisher that restarts at sequence 0.
#ifndef KVCANARY_TESTS_AUDITOR_FAKE_KV_PUBLISHER_H_
#define KVCANARY_TESTS_AUDITOR_FAKE_KV_PUBLISHER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "auditor/kv_events/wire.h"
#include "msgpack.hpp"
#include "zmq.hpp"
#include "zmq_addon.hpp"

namespace kvcanary::auditor::testing {

// One event to encode. Hashes are integers unless `bytes_hashes`.
struct FakeEvent {
  std::string type = "BlockStored";
  std::vector<uint64_t> hashes;
  std::optional<uint64_t> parent;
  std::vector<int64_t> token_ids;
  int64_t block_size = 4;
  std::string medium = "GPU";  // "": nil (an engine without mediums)
};

// One BlockStored event of chained blocks (anything with hash, parent and
// token_ids: the fake target's FakeTargetOptions::StoredBlock).
template <typename Blocks>
FakeEvent StoredEvent(const Blocks& blocks, int64_t block_size) {
  FakeEvent e;
  e.block_size = block_size;
  e.parent = blocks.front().parent;
  for (const auto& b : blocks) {
    e.hashes.push_back(b.hash);
    e.token_ids.insert(e.token_ids.end(), b.token_ids.begin(),
                       b.token_ids.end());
  }
  return e;
}

// msgpack of a batch [ts, events, 0]; events as maps keyed by "type"
// (`map_shape`) or as tagged positional arrays (older vLLM).
inline std::string EncodeBatch(const std::vector<FakeEvent>& events,
                               bool map_shape = true,
                               bool bytes_hashes = false) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(&buf);
  auto hash = [&](uint64_t h) {
    if (bytes_hashes) {
      std::string b(32, '\0');
      for (int i = 0; i < 8; ++i) b[31 - i] = static_cast<char>(h >> (8 * i));
      pk.pack_bin(32);
      pk.pack_bin_body(b.data(), 32);
    } else {
      pk.pack_uint64(h);
    }
  };
  pk.pack_array(3);
  pk.pack_double(1.7e9);
  pk.pack_array(static_cast<uint32_t>(events.size()));
  for (const FakeEvent& e : events) {
    const bool stored = e.type == "BlockStored";
    const bool removed = e.type == "BlockRemoved";
    const uint32_t n = stored ? 7 : removed ? 3 : 1;
    if (map_shape) {
      pk.pack_map(n);
      pk.pack(std::string("type"));
    } else {
      pk.pack_array(n);
    }
    pk.pack(e.type);
    if (!stored && !removed) continue;
    if (map_shape) pk.pack(std::string("block_hashes"));
    pk.pack_array(static_cast<uint32_t>(e.hashes.size()));
    for (uint64_t h : e.hashes) hash(h);
    if (stored) {
      if (map_shape) pk.pack(std::string("parent_block_hash"));
      if (e.parent.has_value()) {
        hash(*e.parent);
      } else {
        pk.pack_nil();
      }
      if (map_shape) pk.pack(std::string("token_ids"));
      pk.pack(e.token_ids);
      if (map_shape) pk.pack(std::string("block_size"));
      pk.pack(e.block_size);
      if (map_shape) pk.pack(std::string("lora_id"));
      pk.pack_nil();
    }
    if (map_shape) pk.pack(std::string("medium"));
    if (e.medium.empty()) {
      pk.pack_nil();
    } else {
      pk.pack(e.medium);
    }
  }
  pk.pack(0);  // data_parallel_rank
  return std::string(buf.data(), buf.size());
}

class FakeKvPublisher {
 public:
  explicit FakeKvPublisher(bool replay = true) {
    pub_.set(zmq::sockopt::linger, 0);
    pub_.bind("tcp://127.0.0.1:*");
    endpoint_ = pub_.get(zmq::sockopt::last_endpoint);
    if (replay) {
      router_.set(zmq::sockopt::linger, 0);
      router_.bind("tcp://127.0.0.1:*");
      replay_endpoint_ = router_.get(zmq::sockopt::last_endpoint);
      thread_ = std::thread([this] { ServeReplay(); });
    }
  }
  ~FakeKvPublisher() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  // --kv-events flag value.
  std::string flag() const {
    return replay_endpoint_.empty() ? endpoint_
                                    : endpoint_ + ",replay=" + replay_endpoint_;
  }

  // Publishes the next batch (kept for replay); `drop`: not sent, as a PUB
  // past its high-water mark would; `forget`: not kept for replay either.
  int64_t Publish(const std::string& payload, bool drop = false,
                  bool forget = false) {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t seq = next_seq_++;
    if (!forget) buffer_[seq] = payload;
    if (!drop) {
      std::vector<zmq::const_buffer> frames = {
          zmq::buffer(topic_), zmq::buffer(kv_events::EncodeSequence(seq)),
          zmq::buffer(payload)};
      zmq::send_multipart(pub_, frames);
    }
    return seq;
  }
  // A restart: sequence numbers from 0, the replay buffer empty.
  void Restart() {
    std::lock_guard<std::mutex> lock(mu_);
    next_seq_ = 0;
    buffer_.clear();
  }
  // Raw frames, for malformed messages.
  void SendRaw(const std::vector<std::string>& frames) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<zmq::const_buffer> b;
    for (const std::string& f : frames) b.push_back(zmq::buffer(f));
    zmq::send_multipart(pub_, b);
  }

 private:
  void ServeReplay() {
    while (!stop_) {
      zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(20));
      if ((item.revents & ZMQ_POLLIN) == 0) continue;
      std::vector<zmq::message_t> req;
      if (!zmq::recv_multipart(router_, std::back_inserter(req))) continue;
      if (req.size() != 3) continue;
      const std::string id = req[0].to_string();
      const int64_t start =
          kv_events::DecodeSequence(req[2].to_string()).value_or(0);
      std::map<int64_t, std::string> copy;
      {
        std::lock_guard<std::mutex> lock(mu_);
        copy = buffer_;
      }
      for (auto it = copy.lower_bound(start); it != copy.end(); ++it) {
        std::vector<zmq::const_buffer> f = {
            zmq::buffer(id), zmq::buffer(std::string()),
            zmq::buffer(kv_events::EncodeSequence(it->first)),
            zmq::buffer(it->second)};
        zmq::send_multipart(router_, f);
      }
      std::vector<zmq::const_buffer> end = {
          zmq::buffer(id), zmq::buffer(std::string()),
          zmq::buffer(kv_events::EncodeSequence(-1)),
          zmq::buffer(std::string())};
      zmq::send_multipart(router_, end);
    }
  }

  zmq::context_t context_{1};
  zmq::socket_t pub_{context_, zmq::socket_type::pub};
  zmq::socket_t router_{context_, zmq::socket_type::router};
  std::string endpoint_, replay_endpoint_;
  const std::string topic_;
  std::mutex mu_;
  int64_t next_seq_ = 0;
  std::map<int64_t, std::string> buffer_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvcanary::auditor::testing

#endif  // KVCANARY_TESTS_AUDITOR_FAKE_KV_PUBLISHER_H_
