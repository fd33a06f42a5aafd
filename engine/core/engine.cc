#include "engine/core/engine.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/check.h"

namespace kvcanary::engine {
namespace {

SchedulerOptions WithSeqLen(SchedulerOptions s, const ModelConfig& c,
                            const FaultSet& faults) {
  s.seq_len = c.seq_len;
  s.publish_aborted = faults.has(Fault::kAbortCacheInsert);
  return s;
}

}  // namespace

PagePoolOptions PoolOptionsFor(const ModelConfig& config,
                               const EngineOptions& options) {
  PagePoolOptions p;
  p.n_layers = config.n_layers;
  // no-scrub-reuse: pages go back unscrubbed whatever the policy says.
  p.scrub = options.faults.has(Fault::kNoScrubReuse) ? ScrubPolicy::kNone
                                                     : options.scrub;
  p.free_list = options.free_list;
  p.trace = options.trace;
  p.layout.page_tokens = options.page_tokens;
  p.layout.kv_heads = config.n_kv_heads;
  p.layout.head_dim = config.head_dim();
  p.num_pages = options.num_pages > 0
                    ? options.num_pages
                    : options.scheduler.max_batch_seqs *
                          ((config.seq_len + options.page_tokens - 1) /
                           options.page_tokens);
  return p;
}

Engine::Engine(const Model* model, const EngineOptions& options)
    : model_(model),
      options_(options),
      threads_(options.num_threads),
      pool_(PoolOptionsFor(model->config, options)),
      prefix_cache_(options.prefix_cache != PrefixCacheMode::kOff
                        ? std::make_unique<PrefixCache>(
                              &pool_, options.prefix_cache,
                              options.faults.has(Fault::kPrefixHashCollision),
                              options.trace, options.cache_salt)
                        : nullptr),
      scheduler_(WithSeqLen(options.scheduler, model->config, options.faults),
                 &pool_, prefix_cache_.get()),
      runner_(model, &pool_, &threads_,
              ModelRunnerOptions{options.watermark, options.trace,
                                 options.faults.has(Fault::kNoScrubReuse),
                                 options.numerics}) {
  if (prefix_cache_ != nullptr && options.host_tier_pages > 0) {
    prefix_cache_->EnableHostTier(options.host_tier_pages,
                                  options.faults.has(Fault::kTierDropsSalt));
  }
  if (prefix_cache_ != nullptr && options.kv_events != nullptr) {
    prefix_cache_->EnableEvents();
  }
}

absl::StatusOr<RequestId> Engine::Submit(TenantId tenant,
                                         std::vector<int> prompt,
                                         const SamplingParams& sampling,
                                         const SubmitOptions& options) {
  const ModelConfig& cfg = model_->config;
  if (prompt.empty()) return absl::InvalidArgumentError("empty prompt");
  for (int t : prompt) {
    if (t < 0 || t >= cfg.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", t, " outside the vocabulary [0, ", cfg.vocab_size, ")"));
    }
  }
  if (static_cast<int>(prompt.size()) >= cfg.seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt of ", prompt.size(),
        " tokens leaves no room in the context of ", cfg.seq_len, " tokens"));
  }
  if (sampling.max_tokens < 1) {
    return absl::InvalidArgumentError("max_tokens must be at least 1");
  }
  if (!(sampling.temperature >= 0.0f)) {
    return absl::InvalidArgumentError("temperature must be >= 0");
  }
  if (!(sampling.top_p >= 0.0f && sampling.top_p <= 1.0f)) {
    return absl::InvalidArgumentError("top_p must be in [0, 1]");
  }
  const int pages = pool_.PagesFor(std::min<int>(
      static_cast<int>(prompt.size()) + sampling.max_tokens - 1, cfg.seq_len));
  if (pages > pool_.num_pages()) {
    return absl::ResourceExhaustedError(absl::StrCat("request needs ", pages,
                                                     " KV pages; the pool has ",
                                                     pool_.num_pages()));
  }
  if (options.id == kReservedRequestId) {
    return absl::InvalidArgumentError(
        "request id 18446744073709551615 (2^64 - 1) is reserved");
  }
  RequestId id = options.id;
  if (id == kNoRequest) {
    do {
      id = RequestId(next_request_++);
    } while (requests_.contains(id));
  } else if (requests_.contains(id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("request id ", id.value(), " is already in use"));
  }
  auto seq =
      std::make_unique<Sequence>(id, tenant, std::move(prompt), sampling);
  seq->role = options.role;
  seq->cache_salt = options.cache_salt;
  scheduler_.Add(seq.get());
  requests_.emplace(id, std::move(seq));
  return id;
}

void Engine::Abort(RequestId id, absl::Status status) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  scheduler_.Abort(it->second.get(), std::move(status));
}

StepEvents Engine::Step() {
  StepEvents events;
  Batch batch = scheduler_.Schedule();
  for (Sequence* seq : batch.reserved) events.reserved.push_back(seq->id);
  if (!batch.entries.empty()) RunBatch(batch, &events);
  PublishKvEvents();
  return events;
}

void Engine::PublishKvEvents() {
  if (options_.kv_events == nullptr || prefix_cache_ == nullptr) return;
  std::vector<KvCacheEvent> events = prefix_cache_->TakeEvents();
  if (events.empty()) return;
  options_.kv_events->Publish(KvEventBatch{absl::Now(), std::move(events)});
}

void Engine::RunBatch(const Batch& batch, StepEvents* events) {
  std::vector<size_t> violations_before;
  if (options_.trace != nullptr) {
    for (const BatchEntry& e : batch.entries)
      violations_before.push_back(e.seq->violations.size());
  }
  StepOutput out = runner_.Run(batch);
  if (options_.faults.has(Fault::kSampleWrongRow)) SampleWrongRows(batch, &out);
  if (options_.trace != nullptr) {
    // Violations are never sampled away.
    for (size_t i = 0; i < batch.entries.size(); ++i) {
      const auto& v = batch.entries[i].seq->violations;
      for (size_t k = violations_before[i]; k < v.size(); ++k) {
        options_.trace->Emit(FromViolation(v[k]));
      }
    }
  }
  for (Sequence* seq :
       scheduler_.Postprocess(batch, out, model_->config.vocab_size)) {
    events->finished.push_back(seq->id);
  }
  for (const BatchEntry& e : batch.entries) {
    if (e.seq->role == SequenceRole::kPrefillOnly &&
        e.seq->state.phase() == RequestPhase::kTransferring) {
      events->prefilled.push_back(e.seq->id);
    } else {
      events->progressed.push_back(e.seq->id);
    }
  }
}

void Engine::SampleWrongRows(const Batch& batch, StepOutput* out) {
  std::vector<size_t> rows;  // the entries decoding this step
  bool joined = false;
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    const Sequence& seq = *batch.entries[i].seq;
    if (seq.state.phase() != RequestPhase::kDecoding || out->refused[i]) {
      continue;
    }
    rows.push_back(i);
    joined = joined || seq.output.size() == 1;  // its first decode step
  }
  if (rows.size() < 2) return;
  if (joined && wrong_row_steps_left_ == 0) {
    wrong_row_steps_left_ = options_.sample_wrong_row_steps;
  }
  if (wrong_row_steps_left_ == 0) return;
  --wrong_row_steps_left_;
  const size_t vocab = model_->config.vocab_size;
  const std::vector<float> logits = out->logits;
  for (size_t k = 0; k < rows.size(); ++k) {
    std::copy_n(logits.data() + rows[(k + 1) % rows.size()] * vocab, vocab,
                out->logits.data() + rows[k] * vocab);
  }
}

absl::Status Engine::CheckTransferFits(const Sequence& seq,
                                       const std::vector<kv::Page>& pages,
                                       int computed_tokens,
                                       int first_token) const {
  const KvPageLayout& layout = pool_.layout();
  const size_t row_bytes = KvRowBytes();
  if (computed_tokens < 1 ||
      computed_tokens > static_cast<int>(seq.prompt.size()) ||
      first_token < 0 || first_token >= model_->config.vocab_size) {
    return absl::InvalidArgumentError("transfer does not fit the request");
  }
  for (const kv::Page& page : pages) {
    if (page.index >= seq.block_table.size() ||
        page.layer >= static_cast<uint32_t>(pool_.n_layers()) ||
        page.slots > static_cast<uint32_t>(layout.page_tokens) ||
        page.kv_bytes.size() != 2 * page.slots * row_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("page ", page.index, " layer ", page.layer,
                       " does not fit the reservation or the KV geometry"));
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::CheckTransferStamps(Sequence* seq,
                                         const std::vector<kv::Page>& pages) {
  bool refused = false;
  for (const kv::Page& page : pages) {
    const StampIdentity& w = page.stamp.writer;
    std::optional<ViolationKind> kind;
    if (w.tenant != seq->tenant) {
      kind = ViolationKind::kForeignTenantRead;
    } else if (w.request != seq->id && !page.stamp.shared()) {
      kind = ViolationKind::kStaleRequestRead;
    }
    if (!kind.has_value()) continue;
    const PageRef ref = seq->block_table[page.index];
    WatermarkViolation v;
    v.kind = *kind;
    v.layer = page.layer;
    v.page = ref.page;
    v.slots_read = page.slots;
    v.reader = StampIdentity{seq->id, seq->tenant, ref.generation};
    v.writer = w;
    v.writer_shared = page.stamp.shared();
    v.owner = pool_.stamp(static_cast<int>(page.layer), ref.page).owner;
    v.filled = page.stamp.filled;
    seq->violations.push_back(v);
    if (options_.trace != nullptr) options_.trace->Emit(FromViolation(v));
    refused = refused || options_.watermark == WatermarkMode::kEnforce;
  }
  if (!refused) return absl::OkStatus();
  const WatermarkViolation& v = seq->violations.back();
  absl::Status status = absl::DataLossError(absl::StrCat(
      "request refused: watermark check found ", ViolationKindName(v.kind),
      " in the K/V handed to it (written by tenant ", v.writer.tenant.value(),
      "); no output built on that memory is returned"));
  scheduler_.Abort(seq, status);
  return status;
}

void Engine::WriteTransferredPages(const Sequence& seq,
                                   const std::vector<kv::Page>& pages) {
  const KvPageLayout& layout = pool_.layout();
  const size_t row_bytes = KvRowBytes();
  for (const kv::Page& page : pages) {
    // A prefix cache hit here already holds these tokens: the page is the
    // cache's, read as it is (Scheduler::Schedule).
    if (page.index < static_cast<uint32_t>(seq.shared_pages)) continue;
    const PageRef ref = seq.block_table[page.index];
    char* dst =
        layout.page(pool_.layer_base(static_cast<int>(page.layer)), ref.page);
    const size_t half = page.slots * row_bytes;
    std::memcpy(KvPageLayout::keys(dst), page.kv_bytes.data(), half);
    std::memcpy(layout.values(dst), page.kv_bytes.data() + half, half);
    // The writer is whoever the frame says wrote these bytes (the receiver
    // checked it is this request, unless a fault let another's through),
    // at the generation this request holds the page; a shared prefix stays
    // shared.
    PageStamp* stamp = KvPageLayout::stamp(dst);
    StampWrite(stamp,
               StampIdentity{page.stamp.writer.request,
                             page.stamp.writer.tenant, ref.generation},
               0, page.slots);
    stamp->set_shared(page.stamp.shared());
  }
}

absl::Status Engine::InstallTransferredKv(RequestId id,
                                          const std::vector<kv::Page>& pages,
                                          int computed_tokens,
                                          int first_token) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return absl::NotFoundError("unknown request");
  Sequence* seq = it->second.get();
  if (seq->role != SequenceRole::kRemotePrefill ||
      seq->state.phase() != RequestPhase::kTransferring) {
    return absl::FailedPreconditionError(
        absl::StrCat("request ", id.value(), " is not waiting for a transfer (",
                     RequestPhaseName(seq->state.phase()), ")"));
  }
  absl::Status fits =
      CheckTransferFits(*seq, pages, computed_tokens, first_token);
  if (!fits.ok()) return fits;
  // The K/V must be this request's (or its tenant's shared prefix): the
  // receiver checked the frames against the transfer's metadata, and this
  // checks that the transfer handed over is this request's. Under the
  // watermark mode: detect records, enforce refuses before anything is
  // installed or any token released.
  if (options_.watermark != WatermarkMode::kOff) {
    absl::Status stamps = CheckTransferStamps(seq, pages);
    if (!stamps.ok()) return stamps;
  }
  WriteTransferredPages(*seq, pages);
  if (options_.trace != nullptr) {
    for (const kv::Page& page : pages) {
      // One event per page, not per layer; none for a cached page.
      if (page.layer != 0 ||
          page.index < static_cast<uint32_t>(seq->shared_pages)) {
        continue;
      }
      EmitTransferredWrite(seq->block_table[page.index], page);
    }
  }
  scheduler_.StartDecodeAfterTransfer(seq, first_token, computed_tokens);
  return absl::OkStatus();
}

void Engine::EmitTransferredWrite(PageRef ref, const kv::Page& page) {
  TraceEvent e;
  e.type = TraceEventType::kPageWrite;
  e.page = ref.page;
  e.gen = pool_.generation(ref.page);
  e.tenant = page.stamp.writer.tenant;
  e.request = page.stamp.writer.request;
  e.first_slot = 0;
  e.last_slot_exclusive = page.slots;
  e.writer_gen = ref.generation;
  options_.trace->Emit(e);
  if (!page.stamp.shared()) return;
  // The bytes are their tenant's shared prefix here too (kvt2 page_share:
  // the writer stays the request that computed them).
  TraceEvent share;
  share.type = TraceEventType::kPageShare;
  share.page = ref.page;
  share.gen = ref.generation;
  share.tenant = page.stamp.writer.tenant;
  share.request = page.stamp.writer.request;
  options_.trace->Emit(share);
}

RequestId Engine::WriteTransferredPage(PageRef ref, const kv::Page& page) {
  const KvPageLayout& layout = pool_.layout();
  const size_t row_bytes = KvRowBytes();
  CHECK_LT(ref.page.value(), static_cast<uint32_t>(pool_.num_pages()));
  CHECK_LT(page.layer, static_cast<uint32_t>(pool_.n_layers()));
  CHECK_LE(page.slots, static_cast<uint32_t>(layout.page_tokens));
  CHECK_EQ(page.kv_bytes.size(), 2 * page.slots * row_bytes);
  char* dst =
      layout.page(pool_.layer_base(static_cast<int>(page.layer)), ref.page);
  const size_t half = page.slots * row_bytes;
  std::memcpy(KvPageLayout::keys(dst), page.kv_bytes.data(), half);
  std::memcpy(layout.values(dst), page.kv_bytes.data() + half, half);
  PageStamp* stamp = KvPageLayout::stamp(dst);
  const StampIdentity writer{page.stamp.writer.request,
                             page.stamp.writer.tenant, ref.generation};
  const auto late = StampWrite(stamp, writer, 0, page.slots);
  stamp->set_shared(page.stamp.shared());
  if (options_.trace != nullptr && page.layer == 0) {
    EmitTransferredWrite(ref, page);
  }
  if (!late.has_value() || options_.watermark == WatermarkMode::kOff) {
    return kNoRequest;
  }
  WatermarkViolation v;
  v.kind = *late;
  v.layer = page.layer;
  v.page = ref.page;
  v.slots_read = page.slots;
  v.reader = stamp->owner;  // whose page it landed in
  v.writer = writer;
  v.owner = stamp->owner;
  v.filled = stamp->filled;
  if (options_.trace != nullptr) options_.trace->Emit(FromViolation(v));
  if (pool_.is_free(ref.page)) return kNoRequest;
  auto it = requests_.find(stamp->owner.request);
  if (it == requests_.end() || it->second->state.finished()) return kNoRequest;
  Sequence* victim = it->second.get();
  victim->violations.push_back(v);
  if (options_.watermark == WatermarkMode::kEnforce) {
    scheduler_.Abort(
        victim, absl::DataLossError(absl::StrCat(
                    "a late KV write from request ", writer.request.value(),
                    " landed in this request's page ", ref.page.value())));
  }
  return victim->id;
}

void Engine::FinishTransfer(RequestId id, absl::Status status) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second->state.finished()) return;
  scheduler_.FinishTransfer(it->second.get(), std::move(status));
}

void Engine::RunUntilIdle() {
  while (has_work()) {
    const int before = scheduler_.num_running() + scheduler_.num_waiting();
    Step();
    // A waiting request that can never be admitted would spin forever; Submit
    // refuses those, so a step always makes progress.
    CHECK(scheduler_.num_running() > 0 || scheduler_.num_waiting() < before ||
          !has_work());
  }
}

const Sequence* Engine::Get(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

void Engine::Release(RequestId id) {
  auto it = requests_.find(id);
  CHECK(it != requests_.end());
  CHECK(it->second->state.finished());
  requests_.erase(it);
}

}  // namespace kvcanary::engine
