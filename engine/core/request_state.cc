#include "engine/core/request_state.h"

#include "common/check.h"

namespace kvcanary::engine {

const char* RequestPhaseName(RequestPhase phase) {
  switch (phase) {
    case RequestPhase::kAdmitted:
      return "admitted";
    case RequestPhase::kPrefilling:
      return "prefilling";
    case RequestPhase::kTransferring:
      return "transferring";
    case RequestPhase::kDecoding:
      return "decoding";
    case RequestPhase::kFinished:
      return "finished";
  }
  return "unknown";
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kTransferred:
      return "transferred";
    case FinishReason::kAbort:
      return "abort";
  }
  return "unknown";
}

void RequestState::StartPrefill() {
  CHECK(phase_ == RequestPhase::kAdmitted) << RequestPhaseName(phase_);
  phase_ = RequestPhase::kPrefilling;
}

void RequestState::StartTransfer() {
  CHECK(phase_ == RequestPhase::kPrefilling) << RequestPhaseName(phase_);
  phase_ = RequestPhase::kTransferring;
}

void RequestState::StartDecode() {
  CHECK(phase_ == RequestPhase::kPrefilling ||
        phase_ == RequestPhase::kTransferring)
      << RequestPhaseName(phase_);
  phase_ = RequestPhase::kDecoding;
}

void RequestState::Finish(FinishReason reason) {
  CHECK(!finished()) << "finished twice";
  CHECK(reason == FinishReason::kStop || reason == FinishReason::kLength ||
        (reason == FinishReason::kTransferred &&
         phase_ == RequestPhase::kTransferring));
  phase_ = RequestPhase::kFinished;
  reason_ = reason;
}

void RequestState::Abort(absl::Status status) {
  CHECK(!status.ok());
  if (finished()) return;
  phase_ = RequestPhase::kFinished;
  reason_ = FinishReason::kAbort;
  abort_status_ = std::move(status);
}

}  // namespace kvcanary::engine
