// The one request state machine, shared by every role (single process,
// router, prefill node, decode node):
//
//   Admitted -> Prefilling -> [Transferring ->] Decoding -> Finished(reason)
//
// An abort anywhere is Finished with kAbort and a Status saying why. There is
// exactly one "finished" truth: finished(). Transitions are checked: an
// illegal one is a bug and crashes.
//
// Not thread-safe; owned by whoever owns the request.
#ifndef KVCANARY_ENGINE_CORE_REQUEST_STATE_H_
#define KVCANARY_ENGINE_CORE_REQUEST_STATE_H_

#include "absl/status/status.h"

namespace kvcanary::engine {

enum class RequestPhase {
  kAdmitted,
  kPrefilling,
  kTransferring,
  kDecoding,
  kFinished
};
enum class FinishReason {
  kNone,
  kStop,         // the model emitted an end token (or a stop sequence matched)
  kLength,       // max_tokens reached, or the context is full
  kTransferred,  // prefill node: K/V handed to the decode node and acked
  kAbort,        // failed or cancelled; abort_status() says why
};

const char* RequestPhaseName(RequestPhase phase);
const char* FinishReasonName(FinishReason reason);

class RequestState {
 public:
  RequestPhase phase() const { return phase_; }
  bool finished() const { return phase_ == RequestPhase::kFinished; }
  FinishReason finish_reason() const { return reason_; }
  // OK unless the request was aborted.
  const absl::Status& abort_status() const { return abort_status_; }

  void StartPrefill();   // REQUIRES: kAdmitted
  void StartTransfer();  // REQUIRES: kPrefilling
  void StartDecode();    // REQUIRES: kPrefilling or kTransferring
  // REQUIRES: !finished(); reason is kStop or kLength, or kTransferred from
  // kTransferring.
  void Finish(FinishReason reason);
  // Finishes with kAbort. A second abort, or an abort after a normal finish,
  // is ignored: the first finish is the truth. REQUIRES: !status.ok().
  void Abort(absl::Status status);

 private:
  RequestPhase phase_ = RequestPhase::kAdmitted;
  FinishReason reason_ = FinishReason::kNone;
  absl::Status abort_status_;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_CORE_REQUEST_STATE_H_
