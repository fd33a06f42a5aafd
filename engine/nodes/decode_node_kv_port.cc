// The decode node's KV port: the accept loop, which gives each connection
// the KV gate admits a thread of its own (and reaps those done), and that
// thread's transfers, served through the gate and counted; a failed one
// fails its request.
#include <atomic>
#include <memory>
#include <thread>
#include <utility>

#include "absl/time/clock.h"
#include "engine/nodes/decode_node.h"

namespace kvcanary::engine {

void DecodeNode::AcceptLoop() {
  while (true) {
    auto conn = listener_->Accept(absl::Seconds(1));
    if (!conn.ok()) {
      if (conn.status().code() == absl::StatusCode::kCancelled)
        return;  // closed
      if (conn.status().code() != absl::StatusCode::kDeadlineExceeded) {
        absl::SleepFor(absl::Milliseconds(50));  // e.g. out of fds: retry
      }
      continue;
    }
    // One deadline from accept to a verified Auth, and a place among the
    // unauthenticated connections, or a refusal (answered and counted).
    const absl::Time deadline =
        absl::Now() + kv_gate_->admission().options().auth_deadline;
    std::unique_ptr<KvAdmission::Hold> hold = kv_gate_->Admit(**conn);
    if (hold == nullptr) continue;  // closed
    absl::MutexLock lock(&mu_);
    // Reap receivers that are done, so threads do not pile up.
    for (size_t i = 0; i < transfer_threads_.size();) {
      if (transfer_threads_[i].second->load()) {
        transfer_threads_[i].first.join();
        transfer_threads_[i] = std::move(transfer_threads_.back());
        transfer_threads_.pop_back();
      } else {
        ++i;
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    transfer_threads_.emplace_back(
        std::thread(
            [this, done, deadline](std::unique_ptr<kv::FrameConnection> c,
                                   std::unique_ptr<KvAdmission::Hold> h) {
              ServeTransfer(std::move(c), std::move(h), deadline);
              done->store(true);
            },
            std::move(*conn), std::move(hold)),
        done);
  }
}

void DecodeNode::ServeTransfer(std::unique_ptr<kv::FrameConnection> conn,
                               std::unique_ptr<KvAdmission::Hold> hold,
                               absl::Time deadline) {
  // The handshake, then the session's transfers one after another.
  kv_gate_->Serve(*conn, *hold, deadline,
                  [this](const absl::Status& verdict, RequestId id,
                         bool claimed, uint64_t bytes) {
                    metrics_.CountTransfer(bytes, verdict);
                    // A failed transfer fails its request here too: nothing
                    // was written into its pages, so they can go. A
                    // connection that did not claim the reservation (stray,
                    // duplicate) must not touch the request.
                    if (!verdict.ok() && claimed) loop_.Abort(id, verdict);
                  });
}

}  // namespace kvcanary::engine
