// The decode node's reservations, from the engine's pages to their
// install: a request's pages reserved with a metadata slot and a transfer
// token (Reserve), claimed by the KV receiver that presents the token
// (Claim, ClaimedTransfer), its verified transfer handed over through the
// metadata slot (HandOver), then settled and installed by the request's
// handler (SettleTransfer, InstallFromSlot). The metadata-slot-reuse and
// stale-transfer-ref faults live here.
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "engine/nodes/decode_node.h"

namespace kvcanary::engine {

absl::StatusOr<int> DecodeNode::AcquireSlot(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (options_.faults.has(Fault::kMetadataSlotReuse)) {
    // The bug: the next slot round-robin, whether or not its last request
    // has consumed it.
    return static_cast<int>(next_slot_++ % slots_.size());
  }
  auto any_free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const MetadataSlot& s : slots_) {
      if (!s.in_use) return true;
    }
    return false;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&any_free), timeout)) {
    return absl::UnavailableError("no transfer metadata slot free in time");
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].in_use) {
      // stale-transfer-ref: the slot keeps what its last request left.
      if (!options_.faults.has(Fault::kStaleTransferRef)) {
        slots_[i] = MetadataSlot();
      }
      slots_[i].in_use = true;
      return static_cast<int>(i);
    }
  }
  CHECK(false) << "a free metadata slot vanished under the lock";
  return absl::InternalError("unreachable");
}

void DecodeNode::ReleaseSlot(int slot) {
  if (options_.faults.has(Fault::kMetadataSlotReuse)) return;  // never owned
  absl::MutexLock lock(&mu_);
  CHECK(slots_[slot].in_use) << "metadata slot " << slot << " released twice";
  if (options_.faults.has(Fault::kStaleTransferRef)) {
    slots_[slot].in_use = false;  // the rest stays for the next request
    return;
  }
  slots_[slot] = MetadataSlot();
}

absl::StatusOr<std::shared_ptr<DecodeNode::PendingTransfer>>
DecodeNode::Reserve(const NodeRequest& request,
                    const std::shared_ptr<RequestChannel>& channel) {
  const RequestId id = request.id;
  const int prompt_tokens = static_cast<int>(request.prompt.size());
  RETURN_IF_ERROR(loop_.Submit(
      request.tenant, request.prompt, request.sampling,
      {id, SequenceRole::kRemotePrefill, request.cache_salt}, channel));
  // Admitted -> pages reserved (Transferring).
  auto reserved = channel->Wait(options_.transfer_timeout);
  if (!reserved.has_value()) {
    const absl::Status late =
        absl::DeadlineExceededError("no KV pages became free in time");
    loop_.Abort(id, late);
    return late;
  }
  if (reserved->kind == RequestEvent::Kind::kFinished) return reserved->status;
  CHECK(reserved->kind == RequestEvent::Kind::kReserved);
  auto slot = AcquireSlot(options_.transfer_timeout);
  if (!slot.ok()) {
    loop_.Abort(id, slot.status());
    return slot.status();
  }
  auto pending = std::make_shared<PendingTransfer>();
  pending->slot = *slot;
  pending->block_table = reserved->block_table;
  pending->reservation.request = id;
  pending->reservation.tenant = request.tenant;
  pending->reservation.prompt_tokens = prompt_tokens;
  pending->reservation.prompt_pages = loop_.pool().PagesFor(prompt_tokens);
  pending->reservation.reserved_pages =
      static_cast<int>(reserved->block_table.size());
  pending->token = NewTransferToken();
  absl::MutexLock lock(&mu_);
  pending_[id] = pending;
  return pending;
}

std::shared_ptr<DecodeNode::PendingTransfer> DecodeNode::FindPending(
    RequestId id) {
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(id);
  return it == pending_.end() ? nullptr : it->second;
}

// A reservation a KV receiver claimed: the receiver's verdict or its
// transfer goes to the request's handler through the PendingTransfer.
class DecodeNode::ClaimedTransfer : public KvClaim {
 public:
  ClaimedTransfer(DecodeNode* node, std::shared_ptr<PendingTransfer> pending)
      : node_(node), pending_(std::move(pending)) {}

  const KvReservation& reservation() const override {
    return pending_->reservation;
  }
  void WritePage(kv::Page page) override {
    node_->loop_.WriteTransferredPage(pending_->block_table[page.index],
                                      std::move(page));
  }
  void Fail(const absl::Status& verdict) override {
    absl::MutexLock lock(&node_->mu_);
    pending_->result = verdict;
  }
  absl::Status HandOver(KvDelivery delivery) override {
    return node_->HandOver(pending_.get(), std::move(delivery));
  }

 private:
  DecodeNode* node_;
  std::shared_ptr<PendingTransfer> pending_;
};

std::unique_ptr<KvClaim> DecodeNode::Claim(const kv::Metadata& meta) {
  std::shared_ptr<PendingTransfer> pending = FindPending(meta.request);
  absl::MutexLock lock(&mu_);
  if (pending == nullptr || !SameToken(pending->token, meta.transfer_token) ||
      pending->claimed || pending->cancelled) {
    return nullptr;
  }
  pending->claimed = true;
  return std::make_unique<ClaimedTransfer>(this, std::move(pending));
}

absl::Status DecodeNode::HandOver(PendingTransfer* pending,
                                  KvDelivery delivery) {
  // Hand the transfer to the request's handler through its metadata slot,
  // echoing the request id; under the same lock as the check that the
  // handler still waits (once it gave up, the slot may be another's).
  absl::MutexLock lock(&mu_);
  if (pending->cancelled) {
    pending->result = absl::CancelledError("request gave up waiting");
    return *pending->result;
  }
  MetadataSlot& slot = slots_[pending->slot];
  slot.request = delivery.request;
  slot.first_token = delivery.first_token;
  slot.computed_tokens = delivery.computed_tokens;
  slot.pages = std::move(delivery.pages);
  pending->result = absl::OkStatus();
  return absl::OkStatus();
}

absl::Status DecodeNode::SettleTransfer(RequestId id, PendingTransfer& pending,
                                        absl::Status transfer,
                                        bool prefill_gone) {
  absl::MutexLock lock(&mu_);
  pending.cancelled = true;  // a receiver that has not claimed it may not now
  pending_.erase(id);
  // The receiver's verdict is the more precise one when it has one (unless
  // the prefill node went away: a transfer cut short by that is no
  // corruption).
  if (pending.claimed && pending.result.has_value() && !pending.result->ok() &&
      !prefill_gone) {
    return *pending.result;
  }
  if (pending.claimed && !pending.result.has_value() && transfer.ok()) {
    return absl::DataLossError(
        "prefill reported success before the transfer finished");
  }
  if (!pending.claimed && transfer.ok()) {
    return absl::DataLossError(
        "prefill reported success but no KV transfer arrived");
  }
  return transfer;
}

absl::Status DecodeNode::InstallFromSlot(RequestId id,
                                         const PendingTransfer& pending,
                                         absl::Status transfer) {
  if (!transfer.ok() && options_.faults.has(Fault::kStaleTransferRef)) {
    return InstallStale(id, pending, transfer);
  }
  if (!transfer.ok()) {
    ReleaseSlot(pending.slot);
    return transfer;
  }
  // The receiver left the transfer in the request's metadata slot.
  MetadataSlot taken;
  {
    absl::MutexLock lock(&mu_);
    MetadataSlot& s = slots_[pending.slot];
    // metadata-slot-reuse: whatever is in the slot now is taken as this
    // request's, without comparing the echoed id (and left there).
    if (options_.faults.has(Fault::kMetadataSlotReuse)) {
      taken = s;
    } else {
      taken = std::move(s);
      if (taken.request != id) {
        transfer = absl::DataLossError(
            absl::StrCat("metadata slot ", pending.slot, " holds request ",
                         taken.request.value(), ", not ", id.value()));
      }
    }
  }
  ReleaseSlot(pending.slot);
  if (!transfer.ok()) return transfer;
  return loop_.InstallTransferredKv(id, std::move(taken.pages),
                                    taken.computed_tokens, taken.first_token);
}

absl::Status DecodeNode::InstallStale(RequestId id,
                                      const PendingTransfer& pending,
                                      absl::Status transfer) {
  int first_token;
  {
    absl::MutexLock lock(&mu_);
    first_token = slots_[pending.slot].first_token;  // the previous request's
  }
  ReleaseSlot(pending.slot);
  // The reservation's pages are installed as computed up to the whole
  // prompt, with nothing written into them: they hold what their previous
  // occupants left. If even that cannot be installed (a slot never used,
  // a request already aborted), the failure stands.
  absl::Status installed = loop_.InstallTransferredKv(
      id, {}, pending.reservation.prompt_tokens, first_token);
  return installed.ok() ? installed : transfer;
}

}  // namespace kvcanary::engine
