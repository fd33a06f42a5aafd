// Continuous batching: every step, sequences already decoding contribute one
// token each, and waiting sequences join (their whole prompt as one prefill
// chunk) while the page pool and the step budgets allow. Admission is decided
// here and only here: check, then act.
//
// A sequence reserves at admission the pages for its whole context
// (prompt + max_tokens - 1 positions, capped at the model's seq_len), so
// decoding never runs out of pages and nothing is ever preempted.
//
// Not thread-safe; owned by the engine thread.
#ifndef KVCANARY_ENGINE_CORE_SCHEDULER_H_
#define KVCANARY_ENGINE_CORE_SCHEDULER_H_

#include <deque>
#include <vector>

#include "engine/core/page_pool.h"
#include "engine/core/prefix_cache.h"
#include "engine/core/sequence.h"

namespace kvcanary::engine {

struct SchedulerOptions {
  int max_batch_seqs = 64;        // sequences in one step
  int max_prefill_tokens = 2048;  // prompt tokens prefilled in one step
  int seq_len = 0;                // the model's context
  // abort-cache-insert: Abort() publishes the request's full prompt pages
  // to the prefix cache as if computed, whatever they hold.
  bool publish_aborted = false;
};

// One sequence's part of a step: query rows for positions
// [first_pos, first_pos + num_tokens) of `seq`.
struct BatchEntry {
  Sequence* seq = nullptr;
  int first_pos = 0;
  int num_tokens = 0;
};

struct Batch {
  std::vector<BatchEntry> entries;  // prefills first, then decodes
  // kRemotePrefill sequences given their pages in this Schedule(): now in
  // kTransferring, waiting for the prefill node's K/V.
  std::vector<Sequence*> reserved;
  int num_rows() const {
    int n = 0;
    for (const auto& e : entries) n += e.num_tokens;
    return n;
  }
  bool empty() const { return entries.empty() && reserved.empty(); }
};

// What the model runner produced for a batch: logits of the last row of each
// entry, and whether the entry's attention was refused by the watermark check.
struct StepOutput {
  std::vector<float> logits;  // (entries, vocab), f32
  std::vector<bool> refused;  // (entries): enforce mode refused a read
  // (entries): for a prefill entry whose sequence asks for prompt
  // log-probabilities, those of prompt[1..]; empty otherwise.
  std::vector<std::vector<TokenLogprobs>> prompt_logprobs;
};

class Scheduler {
 public:
  // `cache` may be null (no prefix caching); must outlive the scheduler.
  Scheduler(const SchedulerOptions& options, PagePool* pool,
            PrefixCache* cache = nullptr);

  // Queues a sequence; it stays owned by the caller until finished.
  void Add(Sequence* seq);
  // Cancels a sequence wherever it is and frees its pages (cached prefix
  // pages stay cached). Call between steps.
  void Abort(Sequence* seq, absl::Status status);
  // kRemotePrefill: the prefill node's K/V are in the pages (written by the
  // caller) with `first_token` sampled there; the sequence joins decoding.
  // REQUIRES: seq is kTransferring here.
  void StartDecodeAfterTransfer(Sequence* seq, int first_token, int computed);
  // kPrefillOnly: the transfer ended (acked: OK; else the reason). Frees
  // the pages. REQUIRES: seq is kTransferring here.
  void FinishTransfer(Sequence* seq, absl::Status status);

  Batch Schedule();
  // Samples, appends, finishes sequences (end token, max_tokens, full
  // context, refused by the watermark check) and frees their pages. Returns
  // the sequences finished in this step.
  std::vector<Sequence*> Postprocess(const Batch& batch, StepOutput& output,
                                     int vocab_size);

  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_transferring() const {
    return static_cast<int>(transferring_.size());
  }
  // Work a Step() can do now (transferring sequences wait on someone else).
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }

 private:
  int PagesNeeded(const Sequence& seq) const;
  void Release(Sequence* seq);
  // After its prefill: hands the sequence's full prompt pages to the prefix
  // cache (while their keys are new), unless it saw a violation.
  void Publish(Sequence* seq);
  // abort-cache-insert: hands an aborted sequence's full prompt pages to
  // the prefix cache as Publish does, computed or not.
  void PublishAborted(Sequence* seq);
  // Samples the entry's next token and applies stop rules.
  void Advance(Sequence* seq, float* logits, int vocab_size);

  SchedulerOptions options_;
  PagePool* pool_;
  PrefixCache* cache_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;
  std::vector<Sequence*> transferring_;  // holding pages, waiting on a peer
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_CORE_SCHEDULER_H_
