// The acceptance sweep itself (`kvcanary-auditor accept`): sends the
// planned prompts — alone, then the check pass (under load with --load) —
// and judges each answer into its length's checks and findings. RunAccept
// (auditor/audits/accept/accept.cc) calibrates, runs it and turns it into a
// verdict. Its passes are split by file: sweep.cc (the plan, the pass
// alone), sweep_past_limit.cc (refusals), sweep_check_pass.cc (the check
// pass, the load) and sweep_observe.cc (every answer's row, count and
// findings). Not thread-safe; owned by the command's thread (MultiClient
// calls back on it too).
#ifndef KVCANARY_AUDITOR_AUDITS_ACCEPT_SWEEP_H_
#define KVCANARY_AUDITOR_AUDITS_ACCEPT_SWEEP_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "auditor/audits/accept/accept.h"
#include "auditor/audits/accept/calibration.h"
#include "auditor/audits/accept/checks.h"
#include "auditor/audits/accept/plan.h"
#include "auditor/evidence/log.h"
#include "auditor/result/result.h"
#include "auditor/target/target.h"

namespace kvcanary::auditor {

// kConfirm: a check-pass prompt whose nonce did not come back, sent again
// alone, byte for byte.
enum class AcceptPhase { kAlone, kCheck, kUnderLoad, kPast, kConfirm };
const char* AcceptPhaseName(AcceptPhase p);  // alone, check, under_load, ...

// One sweep request, for judging its answer.
struct AcceptProbe {
  int64_t id = 0;
  size_t length = 0;  // index into the lengths
  PromptKind kind = PromptKind::kCount;
  AcceptPhase phase = AcceptPhase::kAlone;
  bool stream = false;
  std::string prompt;
};

// What the sweep sent and found; its owner reads it for the verdict.
struct AcceptTally {
  std::vector<LengthState> lengths;
  int within_max = 0;    // the longest length within the limit swept
  int refuse_above = 0;  // past this a prompt must be refused (0: unknown)
  std::vector<Finding> findings;
  std::map<std::string, int> refused;  // tenant -> 401/403 answers
  int64_t requests = 0, usable = 0;
  std::map<std::string, int64_t> by_kind, by_outcome;
  int64_t load_sent = 0, load_usable = 0;
  std::map<int, int64_t> load_status;  // HTTP status -> load answers
  // Planned: lengths and requests (an upper bound); over the cap, nothing
  // is swept and `over_cap` says why.
  int planned_lengths = 0;
  int64_t planned_requests = 0;
  std::string over_cap;
  // The streamed count probe at the longest length within the limit: a
  // streamed refusal past it means something only if this was answered.
  std::string stream_control;  // "" if not sent
  bool stream_control_usable = false;
  // Golden under load resends the prompt recorded alone: answers that
  // reported cached tokens may have reused KV computed alone.
  int golden_load_answers = 0, golden_load_cached = 0, golden_load_unknown = 0;
};

class AcceptSweep {
 public:
  // The first of session's tenants sweeps; the next `options.load` load.
  // `log` may be null (no evidence rows).
  AcceptSweep(const AcceptOptions& options, const AcceptCalibration& cal,
              Target* session, EvidenceLog* log, AuditorMetrics* metrics);

  // Plans the lengths from the calibration; then Run() sends them.
  void Plan();
  // Alone per length (counts, golden k times, echo k times per position),
  // past the limit, then the check pass. An error only for what stops the
  // command (the evidence store, the target down).
  absl::Status Run();

  const AcceptTally& tally() const { return t_; }

 private:
  const AuditTenant& sweeper() const { return session_->options().tenants[0]; }
  // sweep.cc: the plan and the pass alone within the limit.
  void CountPlanned();
  absl::Status SweepWithin(size_t i);
  absl::Status GoldenAlone(size_t i);
  absl::Status EchoAlone(size_t i, PromptKind position);
  AcceptProbe MakeProbe(size_t length, PromptKind kind, AcceptPhase phase,
                        const std::string& prefix = "");
  Completion SendAlone(const AcceptProbe& p);
  void Progress();

  // sweep_past_limit.cc: the streamed control, the pass past the limit and
  // its answers judged.
  absl::Status StreamControl();
  absl::Status PastLimit();
  void JudgeRefusal(const AcceptProbe& p, const Completion& c,
                    std::vector<Finding>* found);
  // JudgeRefusal of an answer (a usable 200): not refused, and its count.
  void JudgePastLimitAnswer(const AcceptProbe& p, const Completion& c,
                            std::vector<Finding>* found);

  // sweep_check_pass.cc: the check pass, alone or under load.
  absl::Status CheckPass();
  // Sends each check-pass echo miss again alone: a miss is a finding only
  // where the same prompt echoes alone (a small model's echo depends on the
  // cache-busting prefix too; that is not the target losing the prompt).
  absl::Status ConfirmEchoMisses();
  absl::Status RunUnderLoad(std::vector<AcceptProbe> probes);
  ProbeRequest LoadRequest(uint64_t id, int tenant);
  absl::Status ObserveLoad(int tenant, const Completion& c);
  void JudgeCheckPass(const AcceptProbe& p, const Completion& c,
                      std::vector<Finding>* found);

  // sweep_observe.cc: evidence row, metrics, the count (or refusal past the
  // limit) and, in the check pass, the kind's own judgement.
  absl::Status Observe(const AcceptProbe& p, const Completion& c);
  void JudgeCount(const AcceptProbe& p, const Completion& c,
                  std::vector<Finding>* found);
  absl::Status AddFindings(const AcceptProbe& p, const Completion& c,
                           std::vector<Finding> found);
  absl::Status Record(const std::string& kind, nlohmann::json body,
                      bool flush = false) {
    return log_ == nullptr ? absl::OkStatus()
                           : log_->Record(kind, std::move(body), flush);
  }

  const AcceptOptions& o_;
  const AcceptCalibration& cal_;
  Target* session_;
  EvidenceLog* log_;
  AuditorMetrics* metrics_;
  CacheBuster buster_;
  int64_t next_probe_ = 0;
  std::mt19937_64 rng_;  // the load's prompt lengths
  std::chrono::steady_clock::time_point last_progress_;
  // Check-pass echo misses and their findings, to confirm alone.
  struct EchoMiss {
    AcceptProbe probe;
    Finding finding;
    Completion answer;
  };
  std::vector<EchoMiss> echo_misses_;
  AcceptTally t_;
};

// "HTTP 502" / "no HTTP answer (...)": why an answer is not usable (a
// server's own text cut to ~120 characters).
std::string UnusableWhy(const Completion& c);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_ACCEPT_SWEEP_H_
