#include "auditor/kv_events/canned_publisher.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "auditor/kv_events/wire.h"
#include "msgpack.hpp"
#include "zmq.hpp"
#include "zmq_addon.hpp"

namespace kvcanary::auditor::kv_events {

std::string EncodeStoredBatch(const std::vector<CannedStore>& events) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(&buf);
  pk.pack_array(3);
  pk.pack_double(1.7e9);
  pk.pack_array(static_cast<uint32_t>(events.size()));
  for (const CannedStore& e : events) {
    pk.pack_map(7);
    pk.pack(std::string("type"));
    pk.pack(std::string("BlockStored"));
    pk.pack(std::string("block_hashes"));
    pk.pack(e.hashes);
    pk.pack(std::string("parent_block_hash"));
    if (e.parent.has_value()) {
      pk.pack_uint64(*e.parent);
    } else {
      pk.pack_nil();
    }
    pk.pack(std::string("token_ids"));
    pk.pack(e.token_ids);
    pk.pack(std::string("block_size"));
    pk.pack(e.block_size);
    pk.pack(std::string("lora_id"));
    pk.pack_nil();
    pk.pack(std::string("medium"));
    pk.pack(std::string("GPU"));
  }
  pk.pack(0);  // data_parallel_rank
  return std::string(buf.data(), buf.size());
}

struct CannedPublisher::Sockets {
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  zmq::socket_t router{context, zmq::socket_type::router};
};

CannedPublisher::CannedPublisher() : sockets_(std::make_unique<Sockets>()) {}

CannedPublisher::~CannedPublisher() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

absl::Status CannedPublisher::Start() {
  try {
    for (zmq::socket_t* s : {&sockets_->pub, &sockets_->router}) {
      s->set(zmq::sockopt::linger, 0);
      s->bind("tcp://127.0.0.1:*");
    }
    endpoint_ = sockets_->pub.get(zmq::sockopt::last_endpoint);
    replay_endpoint_ = sockets_->router.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(
        absl::StrCat("canned KV event publisher: ", e.what()));
  }
  thread_ = std::thread([this] { ServeReplay(); });
  return absl::OkStatus();
}

int64_t CannedPublisher::Publish(const std::string& payload) {
  absl::MutexLock lock(&mu_);
  const int64_t seq = next_seq_++;
  sent_[seq] = payload;
  const std::string seq_frame = EncodeSequence(seq);
  std::vector<zmq::const_buffer> frames = {zmq::buffer(std::string_view()),
                                           zmq::buffer(seq_frame),
                                           zmq::buffer(payload)};
  zmq::send_multipart(sockets_->pub, frames);
  return seq;
}

// vLLM's replay protocol: ("", start sequence) in; one answer per batch
// kept from there, then sequence -1.
void CannedPublisher::ServeReplay() {
  zmq::socket_t& router = sockets_->router;
  while (!stop_) {
    zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(20));
    if ((item.revents & ZMQ_POLLIN) == 0) continue;
    std::vector<zmq::message_t> req;
    if (!zmq::recv_multipart(router, std::back_inserter(req))) continue;
    if (req.size() != 3) continue;
    const std::string id = req[0].to_string();
    const int64_t start = DecodeSequence(req[2].to_string()).value_or(0);
    std::map<int64_t, std::string> copy;
    {
      absl::MutexLock lock(&mu_);
      copy = sent_;
    }
    for (auto it = copy.lower_bound(start); it != copy.end(); ++it) {
      const std::string seq_frame = EncodeSequence(it->first);
      std::vector<zmq::const_buffer> f = {
          zmq::buffer(id), zmq::buffer(std::string_view()),
          zmq::buffer(seq_frame), zmq::buffer(it->second)};
      zmq::send_multipart(router, f);
    }
    const std::string end = EncodeSequence(-1);
    std::vector<zmq::const_buffer> f = {
        zmq::buffer(id), zmq::buffer(std::string_view()), zmq::buffer(end),
        zmq::buffer(std::string_view())};
    zmq::send_multipart(router, f);
  }
}

}  // namespace kvcanary::auditor::kv_events
