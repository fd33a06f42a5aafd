#include "engine/core/engine_loop.h"

#include <future>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace kvcanary::engine {

// The trace format's enums mirror the engine's, value for value.
static_assert(static_cast<int>(TracePhase::kFinished) ==
              static_cast<int>(RequestPhase::kFinished));
static_assert(static_cast<int>(TraceFinishReason::kAbort) ==
              static_cast<int>(FinishReason::kAbort));
static_assert(static_cast<int>(TraceFinishReason::kTransferred) ==
              static_cast<int>(FinishReason::kTransferred));

void RequestChannel::Push(RequestEvent event) {
  absl::MutexLock lock(&mu_);
  events_.push_back(std::move(event));
}

std::optional<RequestEvent> RequestChannel::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !events_.empty();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
    return std::nullopt;
  }
  RequestEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

EngineLoop::EngineLoop(const Model* model, const EngineOptions& options,
                       int max_waiting)
    : model_(model), engine_(model, options), max_waiting_(max_waiting) {
  UpdateStats();
  thread_ = std::thread([this] { Run(); });
}

EngineLoop::~EngineLoop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void EngineLoop::Post(Command command) {
  absl::MutexLock lock(&mu_);
  commands_.push_back(std::move(command));
}

absl::Status EngineLoop::Submit(TenantId tenant, std::vector<int> prompt,
                                const SamplingParams& sampling,
                                const SubmitOptions& options,
                                std::shared_ptr<RequestChannel> channel) {
  if (queued_.fetch_add(1) >= max_waiting_) {
    queued_.fetch_sub(1);
    return absl::ResourceExhaustedError(
        absl::StrCat("queue full: ", max_waiting_, " requests waiting"));
  }
  std::promise<absl::Status> done;
  auto result = done.get_future();
  Post([&, channel] {
    auto id = engine_.Submit(tenant, std::move(prompt), sampling, options);
    if (id.ok()) {
      tracked_[*id] = Tracked{channel};
      TraceRequest(*engine_.Get(*id));
    } else {
      queued_.fetch_sub(1);
    }
    done.set_value(id.status());
  });
  return result.get();
}

void EngineLoop::Abort(RequestId id, absl::Status status) {
  Post([this, id, status] {
    engine_.Abort(id, status);
    Report({id});
  });
}

absl::Status EngineLoop::InstallTransferredKv(RequestId id,
                                              std::vector<kv::Page> pages,
                                              int computed_tokens,
                                              int first_token) {
  std::promise<absl::Status> done;
  auto result = done.get_future();
  // Everything captured by reference lives on the caller's stack: use it
  // all before set_value() lets the caller return.
  Post([&] {
    absl::Status installed =
        engine_.InstallTransferredKv(id, pages, computed_tokens, first_token);
    Report({id});
    done.set_value(std::move(installed));
  });
  return result.get();
}

void EngineLoop::WriteTransferredPage(PageRef ref, kv::Page page) {
  Post([this, ref, page = std::move(page)] {
    const RequestId victim = engine_.WriteTransferredPage(ref, page);
    if (victim != kNoRequest) Report({victim});
  });
}

void EngineLoop::FinishTransfer(RequestId id, absl::Status status) {
  Post([this, id, status] {
    engine_.FinishTransfer(id, status);
    Report({id});
  });
}

EngineLoopStats EngineLoop::stats() const {
  absl::MutexLock lock(&stats_mu_);
  EngineLoopStats s = stats_;
  s.tokens_generated = tokens_generated_.load(std::memory_order_relaxed);
  return s;
}

void EngineLoop::UpdateStats() {
  absl::MutexLock lock(&stats_mu_);
  const PrefixCache* cache = engine_.prefix_cache();
  stats_.pages_cached = cache != nullptr ? cache->num_unused() : 0;
  stats_.prefix_hit_pages = cache != nullptr ? cache->hit_pages() : 0;
  const HostTier* tier = cache != nullptr ? cache->host_tier() : nullptr;
  if (tier != nullptr) {
    stats_.tier_spilled_pages = cache->spilled_pages();
    stats_.tier_hit_pages = cache->tier_hit_pages();
    stats_.tier_promoted_pages = cache->promoted_pages();
    stats_.tier_evicted_pages = tier->evicted_pages();
    stats_.tier_pages = tier->size();
  }
  stats_.pages_used = engine_.pool().num_used_pages() - stats_.pages_cached;
  stats_.pages_free = engine_.pool().num_free_pages();
  stats_.waiting = engine_.num_waiting();
  stats_.running = engine_.num_running();
  stats_.transferring = engine_.num_transferring();
}

void EngineLoop::TraceRequest(const Sequence& seq) {
  TraceBus* trace = engine_.options().trace;
  if (trace == nullptr) return;
  TraceEvent e;
  e.type = TraceEventType::kRequest;
  e.request = seq.id;
  e.tenant = seq.tenant;
  e.phase = static_cast<TracePhase>(seq.state.phase());
  e.reason = static_cast<TraceFinishReason>(seq.state.finish_reason());
  e.code = seq.state.abort_status().code();
  trace->Emit(e);
}

void EngineLoop::Report(const std::vector<RequestId>& ids) {
  for (RequestId id : ids) {
    auto it = tracked_.find(id);
    if (it == tracked_.end()) continue;
    Tracked& t = it->second;
    const Sequence* seq = engine_.Get(id);
    CHECK(seq != nullptr);
    if (!t.reported_transfer &&
        (seq->state.phase() == RequestPhase::kTransferring ||
         (seq->state.finished() &&
          seq->state.finish_reason() == FinishReason::kTransferred))) {
      t.reported_transfer = true;
      RequestEvent e;
      e.block_table = seq->block_table;
      if (seq->role == SequenceRole::kPrefillOnly) {
        e.kind = RequestEvent::Kind::kPrefilled;
        e.first_token = seq->output.empty() ? -1 : seq->output[0];
        e.logprobs = seq->output_logprobs;
        e.prompt_logprobs = seq->prompt_logprobs;
        e.cached_tokens = seq->cached_tokens;
        t.reported_tokens = seq->output.size();
      } else {
        e.kind = RequestEvent::Kind::kReserved;
      }
      t.channel->Push(std::move(e));
      TraceRequest(*seq);
    }
    if (seq->output.size() > t.reported_tokens) {
      RequestEvent e;
      e.kind = RequestEvent::Kind::kTokens;
      e.tokens.assign(seq->output.begin() + t.reported_tokens,
                      seq->output.end());
      if (seq->output_logprobs.size() == seq->output.size()) {
        e.logprobs.assign(seq->output_logprobs.begin() + t.reported_tokens,
                          seq->output_logprobs.end());
      }
      if (t.reported_tokens == 0 && seq->role == SequenceRole::kLocal) {
        e.prompt_logprobs = seq->prompt_logprobs;
      }
      t.reported_tokens = seq->output.size();
      tokens_generated_.fetch_add(e.tokens.size(), std::memory_order_relaxed);
      t.channel->Push(std::move(e));
    }
    if (seq->state.finished()) {
      TraceRequest(*seq);
      RequestEvent e;
      e.kind = RequestEvent::Kind::kFinished;
      e.reason = seq->state.finish_reason();
      e.status = seq->state.abort_status();
      e.num_prompt_tokens = static_cast<int>(seq->prompt.size());
      e.num_output_tokens = static_cast<int>(seq->output.size());
      e.cached_tokens = seq->cached_tokens;
      e.violations = seq->violations;
      t.channel->Push(std::move(e));
      tracked_.erase(it);
      engine_.Release(id);
      queued_.fetch_sub(1);
    }
  }
}

void EngineLoop::Run() {
  // True when the last step could do nothing (waiting requests, no free
  // pages, the rest held by transfers): only a command can change that, so
  // wait for one instead of spinning.
  bool stalled = false;
  while (true) {
    std::deque<Command> commands;
    bool stop;
    {
      absl::MutexLock lock(&mu_);
      if (commands_.empty() && (stalled || !engine_.has_work()) && !stop_) {
        auto posted = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return !commands_.empty() || stop_;
        };
        mu_.AwaitWithTimeout(absl::Condition(&posted), absl::Milliseconds(100));
      }
      stop = stop_;
      commands.swap(commands_);
    }
    // Commands already queued still run, so no caller waits forever.
    for (Command& c : commands) c();
    if (stop) break;
    stalled = false;
    if (engine_.has_work()) {
      StepEvents ev = engine_.Step();
      std::vector<RequestId> ids = ev.finished;
      ids.insert(ids.end(), ev.reserved.begin(), ev.reserved.end());
      ids.insert(ids.end(), ev.prefilled.begin(), ev.prefilled.end());
      ids.insert(ids.end(), ev.progressed.begin(), ev.progressed.end());
      stalled = ids.empty();
      Report(ids);
    }
    UpdateStats();
  }
  // Shutting down: every request still here ends with an error.
  std::vector<RequestId> left;
  for (const auto& [id, t] : tracked_) left.push_back(id);
  for (RequestId id : left) {
    const Sequence* seq = engine_.Get(id);
    if (seq->state.phase() == RequestPhase::kTransferring &&
        seq->role == SequenceRole::kPrefillOnly) {
      engine_.FinishTransfer(id, absl::UnavailableError("node shutting down"));
    } else {
      engine_.Abort(id, absl::UnavailableError("node shutting down"));
    }
  }
  Report(left);
}

}  // namespace kvcanary::engine
