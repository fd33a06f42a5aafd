#include "engine/core/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "engine/model/tokenizer.h"

namespace kvcanary::engine {

Scheduler::Scheduler(const SchedulerOptions& options, PagePool* pool,
                     PrefixCache* cache)
    : options_(options), pool_(pool), cache_(cache) {
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
  if (options_.publish_aborted) PublishAborted(seq);
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
    // Its log-probabilities came with it, to the node, not to the engine.
    if (seq->sampling.logprobs >= 0) seq->output_logprobs.emplace_back();
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
    // Cached prefix pages: at most all but the last prompt token, which
    // must be computed for its logits. A kRemotePrefill request (decode
    // node) reads its hits instead of the transferred pages; its node
    // caches nothing of its own (Publish runs after a prefill), so only
    // abort-cache-insert puts pages there.
    std::vector<PageRef> hits;
    std::vector<PrefixCache::Key> keys;
    // Prompt log-probabilities need every position's logits: nothing is
    // read from the cache (vLLM does the same).
    if (cache_ != nullptr && !seq->sampling.prompt_logprobs) {
      keys = cache_->Keys(seq->tenant, seq->cache_salt, seq->prompt,
                          (prompt - 1) / pool_->page_tokens());
      hits = cache_->Acquire(keys);
    }
    // Pages the host tier holds are promoted into fresh pool pages, so the
    // request needs as many free pages with a promotion as without.
    int fresh = pages - static_cast<int>(hits.size());
    if (!pool_->CanAllocate(fresh) &&
        (cache_ == nullptr || !cache_->MakeRoom(fresh))) {
      for (const PageRef& p : hits) cache_->Unref(p);
      break;
    }
    if (cache_ != nullptr) {
      fresh -= cache_->PromoteFromTier(keys, seq->tenant, seq->id, seq->prompt,
                                       seq->cache_salt, &hits);
    }
    waiting_.pop_front();
    seq->block_table = std::move(hits);
    seq->shared_pages = static_cast<int>(seq->block_table.size());
    seq->cached_tokens = seq->shared_pages * pool_->page_tokens();
    for (const PageRef& p : pool_->Allocate(seq->tenant, seq->id, fresh)) {
      seq->block_table.push_back(p);
    }
    seq->state.StartPrefill();
    if (seq->role == SequenceRole::kRemotePrefill) {
      // The prefill happens on the prefill node; hold the pages for it.
      seq->state.StartTransfer();
      transferring_.push_back(seq);
      batch.reserved.push_back(seq);
      continue;
    }
    const int cached = seq->shared_pages * pool_->page_tokens();
    batch.entries.push_back(BatchEntry{seq, cached, prompt - cached});
    prefill_tokens += prompt - cached;
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
  for (int i = 0; i < seq->shared_pages; ++i) {
    cache_->Unref(seq->block_table[i]);
  }
  pool_->Free(std::vector<PageRef>(seq->block_table.begin() + seq->shared_pages,
                                   seq->block_table.end()));
  seq->block_table.clear();
  seq->shared_pages = 0;
}

void Scheduler::Publish(Sequence* seq) {
  const int full = static_cast<int>(seq->prompt.size()) / pool_->page_tokens();
  if (cache_ == nullptr || !seq->violations.empty() ||
      seq->shared_pages >= full) {
    return;
  }
  const auto keys =
      cache_->Keys(seq->tenant, seq->cache_salt, seq->prompt, full);
  seq->shared_pages += cache_->PublishRun(
      keys, seq->shared_pages, seq->block_table, seq->prompt, seq->tenant,
      /*as_computed=*/false, seq->cache_salt);
}

void Scheduler::PublishAborted(Sequence* seq) {
  const int full = static_cast<int>(seq->prompt.size()) / pool_->page_tokens();
  if (cache_ == nullptr || seq->shared_pages >= full ||
      static_cast<int>(seq->block_table.size()) < full) {
    return;
  }
  // The bug: no look at how far the request got (num_computed) or what its
  // pages hold; the prompt's keys vouch for them.
  const auto keys =
      cache_->Keys(seq->tenant, seq->cache_salt, seq->prompt, full);
  seq->shared_pages +=
      cache_->PublishRun(keys, seq->shared_pages, seq->block_table, seq->prompt,
                         seq->tenant, /*as_computed=*/true, seq->cache_salt);
}

void Scheduler::Advance(Sequence* seq, float* logits, int vocab_size) {
  // Before sampling, which may scale the logits in place.
  std::vector<float> raw;
  if (seq->sampling.logprobs >= 0) raw.assign(logits, logits + vocab_size);
  const int token = seq->sampler.Sample(logits, vocab_size);
  auto append = [&] {
    seq->output.push_back(token);
    if (!raw.empty()) {
      seq->output_logprobs.push_back(ComputeLogprobs(
          raw.data(), vocab_size, token, seq->sampling.logprobs));
    }
  };
  if (seq->role == SequenceRole::kPrefillOnly) {
    // The first token goes to the decode node with the K/V, whatever it is;
    // the decode node applies the stop rules.
    append();
    seq->state.StartTransfer();
    return;
  }
  if ((token == kBosToken || token == kEosToken) && !seq->sampling.ignore_eos) {
    seq->state.Finish(FinishReason::kStop);
    return;
  }
  append();
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
    const bool prefilled = seq->state.phase() == RequestPhase::kPrefilling;
    if (prefilled && seq->role == SequenceRole::kLocal) {
      seq->state.StartDecode();
    }
    if (prefilled && !output.refused[i]) Publish(seq);
    if (prefilled && !output.refused[i] && seq->sampling.prompt_logprobs) {
      seq->prompt_logprobs = std::move(output.prompt_logprobs[i]);
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
