// The single-process engine: a page pool, a scheduler doing continuous
// batching, and a model runner, driven one step at a time:
//
//   Step():  batch = scheduler.Schedule(); out = runner.Run(batch);
//            scheduler.Postprocess(batch, out)
//
// Not thread-safe; owned by the engine thread. Later roles (prefill and
// decode nodes) wrap it with their own queues.
#ifndef KVCANARY_ENGINE_CORE_ENGINE_H_
#define KVCANARY_ENGINE_CORE_ENGINE_H_

#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/core/faults.h"
#include "engine/core/model_runner.h"
#include "engine/core/page_pool.h"
#include "engine/core/scheduler.h"
#include "engine/core/sequence.h"
#include "engine/model/model.h"
#include "engine/transfer/kv_transfer_format.h"
#include "kernels/thread_pool.h"

namespace kvcanary::engine {

struct EngineOptions {
  int page_tokens = 16;
  // Pages in the pool; 0 = enough for max_batch_seqs full contexts.
  int num_pages = 0;
  int num_threads = 1;  // counts the engine thread itself
  WatermarkMode watermark = WatermarkMode::kEnforce;
  ScrubPolicy scrub = ScrubPolicy::kNone;          // on free
  FreeListOrder free_list = FreeListOrder::kLifo;  // which free page next
  FaultSet faults;  // the engine-level ones: no-scrub-reuse, prefix-hash-...
  // Prefix cache (engine/prefix_cache.h) for prompts prefilled here:
  // tenant-salted keys (default), one key space for all tenants, or none.
  PrefixCacheMode prefix_cache = PrefixCacheMode::kTenant;
  // What a request's cache_salt does to its keys (--cache-salt).
  CacheSaltMode cache_salt = CacheSaltMode::kIgnore;
  // Pages of the host tier prefix pages spill to (--host-tier-pages;
  // engine/core/host_tier.h); 0: none.
  int host_tier_pages = 0;
  // The sample-wrong-row fault's R: decode steps each firing lasts.
  int sample_wrong_row_steps = 8;
  // The matmuls' arithmetic (--numerics; model_runner.h).
  Numerics numerics = Numerics::kInvariant;
  TraceBus* trace =
      nullptr;  // trace events; may be null. Must outlive the engine.
  // The prefix cache's block events (kv_cache_event.h), one batch per step
  // that had any; may be null. Must outlive the engine.
  KvEventSink* kv_events = nullptr;
  SchedulerOptions scheduler;  // seq_len is taken from the model
};

// Options of one Submit().
struct SubmitOptions {
  // The request's id; 0 = let the engine assign one. Nodes pass the router's
  // id so page stamps name the same request on every node. Must be unique
  // among the engine's live requests, and not kReservedRequestId.
  RequestId id;
  SequenceRole role = SequenceRole::kLocal;
  // The request body's "cache_salt" ("" none), applied to the prefix
  // cache's keys as EngineOptions::cache_salt says.
  std::string cache_salt;
};

// What happened in one Step().
struct StepEvents {
  std::vector<RequestId> finished;    // reached Finished in this step
  std::vector<RequestId> reserved;    // kRemotePrefill: pages reserved
  std::vector<RequestId> prefilled;   // kPrefillOnly: K/V ready to send
  std::vector<RequestId> progressed;  // got a new token (finished or not)
};

class Engine {
 public:
  // `model` must outlive the engine.
  Engine(const Model* model, const EngineOptions& options);

  // Queues a request. kInvalidArgument if the prompt is empty, has a token
  // outside the vocabulary, or leaves no room to generate in the context;
  // if max_tokens < 1; if temperature < 0 or top_p is not in [0, 1]; if
  // options.id is kReservedRequestId. kAlreadyExists if options.id is in
  // use.
  absl::StatusOr<RequestId> Submit(TenantId tenant, std::vector<int> prompt,
                                   const SamplingParams& sampling,
                                   const SubmitOptions& options = {});
  // Cancels a queued or running request (no-op if already finished).
  void Abort(RequestId id, absl::Status status);

  // A kRemotePrefill request's K/V arrived from the prefill node: writes each
  // page's K/V into the request's reserved pages (stamped with the writer
  // the frame's stamp names, at the reservation's generation), then the
  // request joins decoding with `first_token`. kFailedPrecondition if the
  // request is not waiting for a transfer; kInvalidArgument if a page does
  // not fit the reservation or the pool's geometry (the caller verified the
  // transfer; this is the last line). Pages written by another request or
  // tenant (not this tenant's shared prefix) are watermark violations:
  // recorded unless the mode is off; in enforce the request is aborted with
  // kDataLoss (returned) before anything is installed.
  absl::Status InstallTransferredKv(RequestId id,
                                    const std::vector<kv::Page>& pages,
                                    int computed_tokens, int first_token);
  // abort-transfer-race: a receiver's write of one transferred page straight
  // into a page it reserved (`ref`: the page and the generation it was
  // reserved at), landing whenever it lands. The stamp's writer is the
  // frame's (whose K/V these are) at ref's generation, shared if the frame's
  // stamp is. If the page was
  // reallocated since, the write is late: a kLateWrite violation attributed
  // to the writer is traced and recorded on the page's current owner, which
  // enforce mode fails. Returns that owner's id, or kNoRequest.
  // REQUIRES: the page fits the pool's geometry (the receiver checked).
  RequestId WriteTransferredPage(PageRef ref, const kv::Page& page);
  // A kPrefillOnly request's transfer ended: OK (acked by decode) or the
  // reason it failed. Frees its pages. No-op if already finished.
  void FinishTransfer(RequestId id, absl::Status status);

  // One scheduling step; its prefix cache events then go to the sink.
  StepEvents Step();
  bool has_work() const { return scheduler_.has_work(); }
  int num_waiting() const { return scheduler_.num_waiting(); }
  int num_running() const { return scheduler_.num_running(); }
  int num_transferring() const { return scheduler_.num_transferring(); }
  // Steps until every submitted request has finished.
  void RunUntilIdle();

  // The request, until Release(); nullptr for an unknown id.
  const Sequence* Get(RequestId id) const;
  // Forgets a finished request. REQUIRES: finished.
  void Release(RequestId id);

  const PagePool& pool() const { return pool_; }
  const PrefixCache* prefix_cache() const { return prefix_cache_.get(); }
  // Direct access to the pages, for fault injection (the demo, tests): plant
  // another tenant's bytes in a request's pages the way the production bugs
  // did, and watch the watermark check catch it.
  PagePool* mutable_pool() { return &pool_; }
  const Model& model() const { return *model_; }
  const EngineOptions& options() const { return options_; }

 private:
  // Runs a scheduled batch through the model and postprocesses it.
  void RunBatch(const Batch& batch, StepEvents* events);
  // Hands the prefix cache's events since the last step to the sink.
  void PublishKvEvents();
  // The sample-wrong-row fault: rotates the decoding entries' logits rows
  // in `out` while it fires (faults.h).
  void SampleWrongRows(const Batch& batch, StepOutput* out);
  // Traces a transferred page's install (layer 0 only): its page_write, and
  // a page_share if the frame's stamp says the bytes are a shared prefix.
  // REQUIRES: options_.trace.
  void EmitTransferredWrite(PageRef ref, const kv::Page& page);
  // Bytes of one token's K (or V) row: kv_heads × head_dim floats.
  size_t KvRowBytes() const {
    return static_cast<size_t>(pool_.layout().kv_heads) *
           pool_.layout().head_dim * sizeof(float);
  }
  // Whether `pages` fit `seq`'s reservation and the KV geometry.
  absl::Status CheckTransferFits(const Sequence& seq,
                                 const std::vector<kv::Page>& pages,
                                 int computed_tokens, int first_token) const;
  // The watermark check of a transfer's pages against `seq` (detect
  // records, enforce refuses): kDataLoss if refused, the request aborted.
  absl::Status CheckTransferStamps(Sequence* seq,
                                   const std::vector<kv::Page>& pages);
  // Copies the pages' K/V into `seq`'s reserved pages and stamps them.
  void WriteTransferredPages(const Sequence& seq,
                             const std::vector<kv::Page>& pages);

  const Model* model_;
  EngineOptions options_;
  kernels::ThreadPool threads_;
  PagePool pool_;
  std::unique_ptr<PrefixCache> prefix_cache_;  // null when off
  Scheduler scheduler_;
  ModelRunner runner_;
  uint64_t next_request_ = 1;
  int wrong_row_steps_left_ = 0;  // sample-wrong-row: steps still to fire
  absl::flat_hash_map<RequestId, std::unique_ptr<Sequence>> requests_;
};

// Pool options for a model: default page count when options.num_pages is 0.
PagePoolOptions PoolOptionsFor(const ModelConfig& config,
                               const EngineOptions& options);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_CORE_ENGINE_H_
