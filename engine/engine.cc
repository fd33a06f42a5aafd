#include "engine/engine.h"

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace kvcanary::engine {
namespace {

SchedulerOptions WithSeqLen(SchedulerOptions s, const ModelConfig& c) {
  s.seq_len = c.seq_len;
  return s;
}

}  // namespace

PagePoolOptions PoolOptionsFor(const ModelConfig& config,
                               const EngineOptions& options) {
  PagePoolOptions p;
  p.n_layers = config.n_layers;
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
      scheduler_(WithSeqLen(options.scheduler, model->config), &pool_),
      runner_(model, &pool_, &threads_, ModelRunnerOptions{options.watermark}) {
}

absl::StatusOr<RequestId> Engine::Submit(TenantId tenant,
                                         std::vector<int> prompt,
                                         const SamplingParams& sampling) {
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
  const RequestId id(next_request_++);
  auto seq =
      std::make_unique<Sequence>(id, tenant, std::move(prompt), sampling);
  scheduler_.Add(seq.get());
  requests_.emplace(id, std::move(seq));
  return id;
}

void Engine::Abort(RequestId id, absl::Status status) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  scheduler_.Abort(it->second.get(), std::move(status));
}

std::vector<RequestId> Engine::Step() {
  Batch batch = scheduler_.Schedule();
  if (batch.empty()) return {};
  StepOutput out = runner_.Run(batch);
  std::vector<RequestId> done;
  for (Sequence* seq :
       scheduler_.Postprocess(batch, out, model_->config.vocab_size)) {
    done.push_back(seq->id);
  }
  return done;
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
