// The decode node's side of a KvReceiver, in memory, for the transfer
// tests (kv_receiver_test, kv_session_test): reservations claimed by their
// transfer token, and what became of each, refusals, violations and
// commits recorded. No node is started.
#ifndef KVCANARY_TESTS_ENGINE_KV_FAKE_HOST_H_
#define KVCANARY_TESTS_ENGINE_KV_FAKE_HOST_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "engine/transfer/kv_receiver.h"
#include "gtest/gtest.h"

namespace kvcanary::engine::kvtest {

// What the fake host knows of one reservation, and what became of it.
struct FakeReservation {
  KvReservation reservation;
  TransferToken token{};
  bool claimed = false;
  std::optional<absl::Status> failed;     // Fail's verdict
  std::optional<KvDelivery> handed_over;  // HandOver's delivery
};

// Thread-safe.
class FakeHost : public KvReceiverHost {
 public:
  // Holds `reservation` (under its request id) for a transfer; its token.
  TransferToken Reserve(const KvReservation& reservation) {
    FakeReservation r;
    r.reservation = reservation;
    r.token = NewTransferToken();
    absl::MutexLock lock(&mu_);
    reservations_[reservation.request] = r;
    return r.token;
  }
  FakeReservation Get(RequestId id) {
    absl::MutexLock lock(&mu_);
    return reservations_.at(id);
  }
  // Reservations a transfer was handed over to.
  int delivered() {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const auto& [id, r] : reservations_) n += r.handed_over.has_value();
    return n;
  }
  std::vector<std::string> refused() {
    absl::MutexLock lock(&mu_);
    return refused_;
  }
  std::vector<WatermarkViolation> violations() {
    absl::MutexLock lock(&mu_);
    return violations_;
  }
  std::vector<TraceEvent> commits() {
    absl::MutexLock lock(&mu_);
    return commits_;
  }

  std::unique_ptr<KvClaim> Claim(const kv::Metadata& meta) override {
    absl::MutexLock lock(&mu_);
    auto it = reservations_.find(meta.request);
    if (it == reservations_.end() || it->second.claimed ||
        !SameToken(it->second.token, meta.transfer_token)) {
      return nullptr;
    }
    it->second.claimed = true;
    return std::make_unique<FakeClaim>(this, it->second.reservation);
  }
  void Refused(const char* reason) override {
    absl::MutexLock lock(&mu_);
    refused_.push_back(reason);
  }
  void Violation(const WatermarkViolation& violation) override {
    absl::MutexLock lock(&mu_);
    violations_.push_back(violation);
  }
  void Committed(const TraceEvent& event) override {
    absl::MutexLock lock(&mu_);
    commits_.push_back(event);
  }

 private:
  class FakeClaim : public KvClaim {
   public:
    FakeClaim(FakeHost* host, const KvReservation& reservation)
        : host_(host), reservation_(reservation) {}
    const KvReservation& reservation() const override { return reservation_; }
    void WritePage(kv::Page) override { ADD_FAILURE() << "pages are staged"; }
    void Fail(const absl::Status& verdict) override {
      absl::MutexLock lock(&host_->mu_);
      host_->reservations_.at(reservation_.request).failed = verdict;
    }
    absl::Status HandOver(KvDelivery delivery) override {
      absl::MutexLock lock(&host_->mu_);
      host_->reservations_.at(reservation_.request).handed_over =
          std::move(delivery);
      return absl::OkStatus();
    }

   private:
    FakeHost* host_;
    KvReservation reservation_;
  };

  absl::Mutex mu_;
  std::map<RequestId, FakeReservation> reservations_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> refused_ ABSL_GUARDED_BY(mu_);
  std::vector<WatermarkViolation> violations_ ABSL_GUARDED_BY(mu_);
  std::vector<TraceEvent> commits_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvcanary::engine::kvtest

#endif  // KVCANARY_TESTS_ENGINE_KV_FAKE_HOST_H_
