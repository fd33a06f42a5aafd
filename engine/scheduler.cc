#include "engine/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "engine/tokenizer.h"

namespace kvcanary::engine {

Scheduler::Scheduler(const SchedulerOptions& options, PagePool* pool)
    : options_(options), pool_(pool) {
  CHECK_GT(options.seq_len, 0);
  CHECK_GT(options.max_batch_seqs, 0);
}

void Scheduler::Add(Sequence* seq) {
  CHECK(seq->state.phase() == RequestPhase::kAdmitted);
  CHECK(!seq->prompt.empty());
  CHECK_LT(static_cast<int>(seq->prompt.size()), options_.seq_len);
  waiting_.push_back(seq);
}

void Scheduler::Abort(Sequence* seq, absl::Status status) {
  if (seq->state.finished()) return;
  seq->state.Abort(std::move(status));
  auto it = std::find(waiting_.begin(), waiting_.end(), seq);
  if (it != waiting_.end()) {
    waiting_.erase(it);
    return;
  }
  auto tit = std::find(transferring_.begin(), transferring_.end(), seq);
  if (tit != transferring_.end()) {
    transferring_.erase(tit);
  } else {
    auto rit = std::find(running_.begin(), running_.end(), seq);
    CHECK(rit != running_.end());
    running_.erase(rit);
  }
  Release(seq);
}

void Scheduler::StartDecodeAfterTransfer(Sequence* seq, int first_token,
                                         int computed) {
  auto it = std::find(transferring_.begin(), transferring_.end(), seq);
  CHECK(it != transferring_.end());
  CHECK(seq->role == SequenceRole::kRemotePrefill);
  transferring_.erase(it);
  seq->num_computed = computed;
  seq->state.StartDecode();
  // The first token was sampled by the prefill node; the stop rules apply
  // to it as to any other.
  if ((first_token == kBosToken || first_token == kEosToken) &&
      !seq->sampling.ignore_eos) {
    seq->state.Finish(FinishReason::kStop);
  } else {
    seq->output.push_back(first_token);
    if (static_cast<int>(seq->output.size()) >= seq->sampling.max_tokens ||
        seq->num_tokens() > options_.seq_len) {
      seq->state.Finish(FinishReason::kLength);
    }
  }
  if (seq->state.finished()) {
    Release(seq);
  } else {
    running_.push_back(seq);
  }
}

void Scheduler::FinishTransfer(Sequence* seq, absl::Status status) {
  auto it = std::find(transferring_.begin(), transferring_.end(), seq);
  CHECK(it != transferring_.end());
  CHECK(seq->role == SequenceRole::kPrefillOnly);
  transferring_.erase(it);
  if (status.ok()) {
    seq->state.Finish(FinishReason::kTransferred);
  } else {
    seq->state.Abort(std::move(status));
  }
  Release(seq);
}

int Scheduler::PagesNeeded(const Sequence& seq) const {
  // The last sampled token is never fed back, so it needs no slot.
  const int context = std::min<int>(
      static_cast<int>(seq.prompt.size()) + seq.sampling.max_tokens - 1,
      options_.seq_len);
  return pool_->PagesFor(context);
}

Batch Scheduler::Schedule() {
  Batch batch;
  // Admit waiting sequences in arrival order; stop at the first that does
  // not fit so a long prompt is not starved by short ones behind it.
  int prefill_tokens = 0;
  int seqs = static_cast<int>(running_.size());
  while (!waiting_.empty() && seqs < options_.max_batch_seqs) {
    Sequence* seq = waiting_.front();
    const int prompt = static_cast<int>(seq->prompt.size());
    if (prefill_tokens > 0 &&
        prefill_tokens + prompt > options_.max_prefill_tokens)
      break;
    const int pages = PagesNeeded(*seq);
    if (!pool_->CanAllocate(pages)) break;
    waiting_.pop_front();
    seq->block_table = pool_->Allocate(seq->tenant, seq->id, pages);
    seq->state.StartPrefill();
    if (seq->role == SequenceRole::kRemotePrefill) {
      // The prefill happens on the prefill node; hold the pages for it.
      seq->state.StartTransfer();
      transferring_.push_back(seq);
      batch.reserved.push_back(seq);
      continue;
    }
    batch.entries.push_back(BatchEntry{seq, 0, prompt});
    prefill_tokens += prompt;
    ++seqs;
  }
  for (Sequence* seq : running_) {
    batch.entries.push_back(BatchEntry{seq, seq->num_computed, 1});
  }
  for (const BatchEntry& e : batch.entries) {
    if (e.seq->state.phase() == RequestPhase::kPrefilling)
      running_.push_back(e.seq);
  }
  return batch;
}

void Scheduler::Release(Sequence* seq) {
  pool_->Free(seq->block_table);
  seq->block_table.clear();
}

void Scheduler::Advance(Sequence* seq, float* logits, int vocab_size) {
  const int token = seq->sampler.Sample(logits, vocab_size);
  if (seq->role == SequenceRole::kPrefillOnly) {
    // The first token goes to the decode node with the K/V, whatever it is;
    // the decode node applies the stop rules.
    seq->output.push_back(token);
    seq->state.StartTransfer();
    return;
  }
  if ((token == kBosToken || token == kEosToken) && !seq->sampling.ignore_eos) {
    seq->state.Finish(FinishReason::kStop);
    return;
  }
  seq->output.push_back(token);
  if (static_cast<int>(seq->output.size()) >= seq->sampling.max_tokens ||
      seq->num_tokens() > options_.seq_len) {
    seq->state.Finish(FinishReason::kLength);
  }
}

std::vector<Sequence*> Scheduler::Postprocess(const Batch& batch,
                                              StepOutput& output,
                                              int vocab_size) {
  std::vector<Sequence*> finished;
  std::vector<Sequence*> to_transfer;
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    const BatchEntry& e = batch.entries[i];
    Sequence* seq = e.seq;
    seq->num_computed = e.first_pos + e.num_tokens;
    if (seq->state.phase() == RequestPhase::kPrefilling &&
        seq->role == SequenceRole::kLocal) {
      seq->state.StartDecode();
    }
    if (output.refused[i]) {
      // Name the worst: another tenant's data before anything else.
      const WatermarkViolation* worst = &seq->violations.front();
      for (const WatermarkViolation& x : seq->violations) {
        if (x.kind == ViolationKind::kForeignTenantRead) {
          worst = &x;
          break;
        }
      }
      const WatermarkViolation& v = *worst;
      seq->state.Abort(absl::DataLossError(absl::StrCat(
          "request refused: watermark check found ", ViolationKindName(v.kind),
          " on page ", v.page.value(), " (", seq->violations.size(),
          " violation(s)); no output built on that memory is returned")));
    } else {
      Advance(seq, output.logits.data() + i * static_cast<size_t>(vocab_size),
              vocab_size);
    }
    if (seq->state.finished()) {
      finished.push_back(seq);
    } else if (seq->state.phase() == RequestPhase::kTransferring) {
      to_transfer.push_back(seq);
    }
  }
  for (Sequence* seq : finished) {
    running_.erase(std::find(running_.begin(), running_.end(), seq));
    Release(seq);
  }
  for (Sequence* seq : to_transfer) {
    running_.erase(std::find(running_.begin(), running_.end(), seq));
    transferring_.push_back(seq);
  }
  return finished;
}

}  // namespace kvcanary::engine
