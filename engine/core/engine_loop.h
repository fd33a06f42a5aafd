// Runs an Engine on its own thread for the node servers. Other threads talk
// to it through thread-safe calls that become commands executed between
// steps; it reports each request's progress through the request's
// RequestChannel. The engine itself stays single-threaded.
#ifndef KVCANARY_ENGINE_CORE_ENGINE_LOOP_H_
#define KVCANARY_ENGINE_CORE_ENGINE_LOOP_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/core/engine.h"

namespace kvcanary::engine {

// What happened to one request, in order.
struct RequestEvent {
  enum class Kind { kReserved, kPrefilled, kTokens, kFinished };
  Kind kind = Kind::kTokens;
  std::vector<PageRef> block_table;  // kReserved, kPrefilled
  int first_token = -1;              // kPrefilled
  int cached_tokens = 0;    // kPrefilled, kFinished: prompt tokens whose K/V
                            // came from the prefix cache here
  std::vector<int> tokens;  // kTokens: the new ones
  // With sampling.logprobs >= 0: kTokens, each new token's (parallel to
  // `tokens`; token -1 where another node computed it); kPrefilled, the
  // first token's (one entry).
  std::vector<TokenLogprobs> logprobs;
  // With sampling.prompt_logprobs: prompt tokens 1.. (kPrefilled, or the
  // first kTokens of a local request).
  std::vector<TokenLogprobs> prompt_logprobs;
  FinishReason reason = FinishReason::kNone;   // kFinished
  absl::Status status;                         // kFinished: why, if aborted
  int num_prompt_tokens = 0;                   // kFinished
  int num_output_tokens = 0;                   // kFinished
  std::vector<WatermarkViolation> violations;  // kFinished
};

// A request's event queue: the engine thread pushes, a server thread waits.
// Thread-safe.
class RequestChannel {
 public:
  void Push(RequestEvent event);
  // The next event, or nullopt after `timeout`.
  std::optional<RequestEvent> Wait(absl::Duration timeout);

 private:
  absl::Mutex mu_;
  std::deque<RequestEvent> events_ ABSL_GUARDED_BY(mu_);
};

struct EngineLoopStats {
  int pages_used = 0;    // held by requests
  int pages_cached = 0;  // held by the prefix cache only (evictable)
  int pages_free = 0;
  uint64_t prefix_hit_pages = 0;  // pages served from the prefix cache
  // The host tier (0 without one): pages spilled into it, found in it,
  // promoted from it, evicted from it, and held now.
  uint64_t tier_spilled_pages = 0;
  uint64_t tier_hit_pages = 0;
  uint64_t tier_promoted_pages = 0;
  uint64_t tier_evicted_pages = 0;
  int tier_pages = 0;
  int waiting = 0;
  int running = 0;
  int transferring = 0;
  uint64_t tokens_generated = 0;
};

// Thread-safe; owns the engine thread.
class EngineLoop {
 public:
  // `max_waiting`: Submit() returns kResourceExhausted beyond this many
  // queued requests. `model` must outlive the loop.
  EngineLoop(const Model* model, const EngineOptions& options, int max_waiting);
  ~EngineLoop();  // aborts what is left and joins the thread

  // Queues a request; its events go to `channel`. Validation errors of
  // Engine::Submit are returned here; kResourceExhausted when full.
  absl::Status Submit(TenantId tenant, std::vector<int> prompt,
                      const SamplingParams& sampling,
                      const SubmitOptions& options,
                      std::shared_ptr<RequestChannel> channel);
  // Cancels a request (no-op if finished or unknown).
  void Abort(RequestId id, absl::Status status);
  // See Engine::InstallTransferredKv. Blocks until the engine thread ran it.
  absl::Status InstallTransferredKv(RequestId id, std::vector<kv::Page> pages,
                                    int computed_tokens, int first_token);
  // See Engine::WriteTransferredPage. Queued; returns at once, as a DMA
  // write would: the write lands when the engine thread gets to it.
  void WriteTransferredPage(PageRef ref, kv::Page page);
  // See Engine::FinishTransfer.
  void FinishTransfer(RequestId id, absl::Status status);

  EngineLoopStats stats() const;
  const Model& model() const { return *model_; }
  // The pool, for reading pages a request holds (its block table came in a
  // kPrefilled event): those bytes are not written until FinishTransfer.
  const PagePool& pool() const { return engine_.pool(); }
  const EngineOptions& options() const { return engine_.options(); }

 private:
  using Command = std::function<void()>;
  void Post(Command command);
  void Run();
  // Pushes what changed for `ids` since last reported; forgets finished ones.
  void Report(const std::vector<RequestId>& ids);
  void UpdateStats();
  // A `request` trace event with the sequence's phase now.
  void TraceRequest(const Sequence& seq);

  const Model* model_;
  Engine engine_;  // touched only by the engine thread (and constructors)
  const int max_waiting_;

  struct Tracked {
    std::shared_ptr<RequestChannel> channel;
    size_t reported_tokens = 0;
    bool reported_transfer = false;
  };
  absl::flat_hash_map<RequestId, Tracked> tracked_;  // engine thread only

  absl::Mutex mu_;
  std::deque<Command> commands_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int> queued_{0};  // submitted, not yet finished
  std::atomic<uint64_t> tokens_generated_{0};
  mutable absl::Mutex stats_mu_;
  EngineLoopStats stats_ ABSL_GUARDED_BY(stats_mu_);
  std::thread thread_;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_CORE_ENGINE_LOOP_H_
