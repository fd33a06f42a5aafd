// Scripted fake inference servers for the auditor's tests: a real HTTP server
// on 127.0.0.1 (OS-chosen port) that answers the way vLLM, SGLang,
// llama.cpp's llama-server, TGI or Ollama's OpenAI-compatible API answer —
// where each advertises its context limit, what it does with an over-long
// prompt, how it reports errors inside a stream that already sent HTTP 200,
// how it reports usage and cached tokens, and which endpoints need the key.
// Every behaviour is taken from docs/targets.md (the server's own code, with
// the version read); the comments in fake_target.cc and
// fake_target_flavors.cc name the section.
//
// What the fake does NOT model: real tokenizers and chat templates (it has
// its own tokenizer, FakeTokenCount), sampling (the output is a
// deterministic function of the processed prompt at any temperature), and
// max_tokens in admission (vLLM, SGLang and TGI also refuse
// prompt + max_tokens over the window; the fake looks at the prompt only).
//
// The output rule: the completion is the tail of the processed prompt — its
// last min(max_tokens, n) fake tokens, exactly as they appear in the prompt
// text, after one space (with `echo` false: `max_tokens` filler words). So a
// greedy golden prompt always gets the same answer, and an echo prompt that
// ends with a nonce gets the nonce back unless the prompt was cut.
#ifndef KVCANARY_TESTS_AUDITOR_FAKE_TARGET_H_
#define KVCANARY_TESTS_AUDITOR_FAKE_TARGET_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"

namespace kvcanary::http {
class Server;
struct Request;
class Response;
}  // namespace kvcanary::http

namespace kvcanary::auditor::testing {

enum class Flavor { kVllm, kSglang, kLlamaCpp, kTgi, kOllama };

// "vllm", "sglang", "llama.cpp", "tgi", "ollama".
absl::string_view FlavorName(Flavor flavor);

enum class OverLimit {
  // The flavor's own 4xx and error body, streamed or not. Exception, as the
  // real server: TGI validates inside the stream, so a streamed over-long
  // request gets HTTP 200 and the error in the stream (see kErrorInStream).
  kReject,
  // Silently keep the last `limit_tokens` tokens (BOS dropped): HTTP 200,
  // usage.prompt_tokens == limit_tokens. (llama.cpp with --context-shift
  // and Ollama really keep a few head tokens too; see docs/targets.md.)
  kKeepTail,
  // Silently keep the first `limit_tokens` tokens (BOS kept): SGLang's
  // --allow-auto-truncate.
  kKeepHead,
  // Silently keep the head and the tail, as llama.cpp's server (builds
  // through 2024, and later ones with --context-shift) cuts a prompt that
  // fills its window n_ctx = limit_tokens + 1: keep the first
  // `keep_head_tokens` (n_keep, BOS included), drop erased_blocks ×
  // n_block_size tokens after them (n_block_size = (n_ctx - n_keep) / 2,
  // erased_blocks = (n_prompt - n_keep - n_block_size) / n_block_size),
  // keep the rest. HTTP 200; usage.prompt_tokens is what was kept, which
  // varies with the prompt's length (docs/targets.md, llama.cpp).
  kKeepHeadAndTail,
  // Non-streamed: the flavor's 4xx. Streamed: HTTP 200, then the error the
  // flavor's way — `data: {"error": {...}}` (vLLM, SGLang, Ollama), an
  // `error: {...}` SSE line (llama.cpp builds before 2025-09), a
  // `data: {"error": "...", "error_type": ...}` event (TGI /v1/completions;
  // TGI /v1/chat/completions drops the error and sends only [DONE]) — then
  // `data: [DONE]`.
  kErrorInStream,
};

// What the server's /v1/completions is (docs/targets.md, "Chat
// completions"); /v1/chat/completions is always served.
enum class CompletionsRoute {
  kOpenAi,  // OpenAI's text completions
  kAbsent,  // no such route: 404 (hosted providers' current models, gateways)
  // llama.cpp's own shape, as its releases before it adopted OpenAI's
  // answered there: {"content", "stop", "tokens_evaluated",
  // "tokens_predicted", "timings", "id_slot"}; a stream of such objects,
  // the last with "stop": true, and no [DONE].
  kLlamaNative,
  // A 200 in a shape nobody documents: {"output": {"text": ...}}.
  kUnknownShape,
};

// What a request body's "cache_salt" does to the prefix cache's keys.
enum class SaltMode {
  kIgnore,  // nothing (servers without salts)
  // vLLM (v1/core/kv_cache_utils.py): the salt is mixed into block 0's
  // hash and nothing else is: no tenant, so whoever sends a salt reads the
  // pages of whoever sent it before (forgeable); a gateway's tenant header
  // is overridden by it.
  kVllm,
  // The tenant's own cache (key, or the gateway's header) partitioned by
  // the salt: a salt never reaches another tenant's pages.
  kScoped,
};

struct FakeTargetOptions {
  Flavor flavor = Flavor::kVllm;
  std::string model = "fake-model";
  // The most prompt tokens (by FakeTokenCount, BOS included) it processes.
  // The number advertised is AdvertisedContext(): vLLM, SGLang and llama.cpp
  // advertise a window one larger, since they refuse a prompt that fills it.
  int limit_tokens = 512;
  bool advertise_limit = true;  // where this flavor does (false: nowhere)
  OverLimit over_limit = OverLimit::kReject;
  int keep_head_tokens = 4;  // n_keep of kKeepHeadAndTail, BOS included
  // A refusal inside a 200 stream is dropped: only `data: [DONE]` follows
  // the headers, whatever the flavor (what TGI's /v1/chat/completions does,
  // here on every route: a stream that dies after its headers).
  bool stream_errors_dropped = false;
  CompletionsRoute completions_route = CompletionsRoute::kOpenAi;
  // Chat as OpenAI's reasoning models take it: a body with `max_tokens`
  // is a 400 naming `max_completion_tokens`, and one with a `temperature`
  // other than 1 a 400 naming `temperature`.
  bool chat_like_reasoning_models = false;
  // > 0: while another completion request is being handled, this is the
  // most prompt tokens processed instead of limit_tokens, and over_limit
  // applies past it (a server whose window shrinks under load: what the
  // auditor must see under load that it cannot see alone).
  int busy_limit_tokens = 0;
  // Bearer key -> tenant; empty: accept any key, or none.
  std::map<std::string, std::string> api_keys;
  // /v1/models answers without a key when false (as llama.cpp, TGI and
  // Ollama do; vLLM and SGLang guard it). The flavor's info endpoints follow
  // the real server regardless: SGLang's and llama.cpp's need the key, TGI's
  // /info does not.
  bool models_needs_key = false;
  double base_ms = 1.0;               // time to first token, plus...
  double prefill_us_per_token = 100;  // ...this per uncached prompt token
  // > 0: every first token comes later by a further draw of an
  // exponential of this mean (the network and queueing noise a real
  // server's first tokens carry), from a generator seeded `jitter_seed`.
  double ttft_jitter_ms = 0;
  uint64_t jitter_seed = 1;
  // A prefix cache across ALL keys: a prompt's leading full blocks seen
  // before (cache_block_tokens each, BOS included) cost nothing. As vLLM, a
  // fully cached prompt still computes its last block.
  bool shared_prompt_cache = false;
  // The same cache, salted by the API key (vLLM's per-tenant cache_salt):
  // a key's own repeat hits, another key's identical prompt does not.
  // REQUIRES: not together with shared_prompt_cache.
  bool per_key_prompt_cache = false;
  int cache_block_tokens = 16;
  // The body's "cache_salt" (an empty one is refused, as vLLM does).
  SaltMode salt_mode = SaltMode::kIgnore;
  // A gateway: with per_key_prompt_cache, a request carrying this header
  // is cached as the tenant it names, not as its key (empty: no gateway).
  std::string tenant_header;
  // > 0: two tiers, as SGLang's hierarchical cache and LMCache's CPU
  // offload: the GPU tier holds this many blocks (first in, first out) and
  // spills what it evicts to an unbounded CPU tier; a block found in either
  // is a hit (the CPU one promoted back).
  int gpu_tier_blocks = 0;
  // The CPU tier keys blocks by their tokens alone, without the salt (the
  // tier that drops the salt): a spilled block hits for any tenant.
  bool cpu_tier_drops_salt = false;
  // Replicas behind a round-robin balancer, each request to the next, each
  // with its own prompt cache; only replica 0's cache calls
  // on_blocks_stored (the one stream an auditor follows).
  int cache_replicas = 1;
  // Report cache hits where the flavor can: vLLM
  // --enable-prompt-tokens-details (always, 0 included), SGLang
  // --enable-cache-report (only when > 0). llama.cpp always reports
  // (usage.prompt_tokens_details.cached_tokens and timings.cache_n); TGI and
  // Ollama never do. Off by default, as on the real servers.
  bool report_cached_tokens = false;
  // llama.cpp's `cache_prompt` (on by default since late 2024): the slot
  // keeps its previous prompt's tokens and evaluates only what follows the
  // longest common prefix with them (at least the last token), reporting
  // the rest as cached — a BOS, or a constant first word, on every request
  // (docs/targets.md, "Cache tiers"). One slot for all requests; off by
  // default so that other tests measure one cache at a time.
  bool slot_prompt_reuse = false;
  // llama.cpp: usage.prompt_tokens_details.cached_tokens as builds with
  // usage_json_oaicompat send it; false: only `timings` (prompt_n, cache_n),
  // as earlier builds do (tools/server/server-task.cpp @ 00efb3e1).
  bool llama_prompt_tokens_details = true;
  // The cache's KV events, as vLLM publishes them (tests/auditor/
  // fake_kv_publisher.h puts them on a stream): called, outside the fake's
  // lock, with the blocks a request stored, chained in order.
  struct StoredBlock {
    uint64_t hash = 0;
    std::optional<uint64_t> parent;
    std::vector<int64_t> token_ids;  // cache_block_tokens of them
  };
  std::function<void(const std::vector<StoredBlock>&)> on_blocks_stored;
  // Events for every block of the prompt, hits included, not only the
  // newly stored ones: for every request (an engine that always reports
  // hits); a request's "kv_cache_report_mode": "full" asks the same for it
  // alone, as vLLM's does (vllm#45261).
  bool events_report_hits = false;
  // Event hashes computed without the salt while the cache itself stays
  // salted per key (SGLang before sglang#30827).
  bool events_ignore_salt = false;
  // llama.cpp /slots shows each slot's last prompt and output (builds before
  // LLAMA_SERVER_SLOTS_DEBUG gated it); otherwise only counts.
  bool slots_expose_prompts = false;
  // > 0: the server stops listening when that many completion requests have
  // arrived (the last one is still answered); connections are refused after.
  int die_after_completions = 0;
  // > 0: the same, once it has silently cut that many over-long prompts
  // (kKeepTail, kKeepHead; the last cut one is still answered): a target
  // that dies after the auditor could prove the cut.
  int die_after_truncations = 0;
  bool echo = true;  // false: fixed filler words instead of the prompt's tail
  // Log-probabilities on whole (non-streamed) completions where the flavor
  // serves them (docs/targets.md, "Log-probabilities, per server"): vLLM
  // and SGLang the legacy object, echo's prompt positions first with a null
  // first figure; llama.cpp chat's {content} shape, and echo refused with
  // a 500; TGI and Ollama none (logprobs null). Each figure is a function
  // of its token and position, so answers alone are bitwise the same...
  bool serves_logprobs = true;
  // ...unless this is > 0: each answer's figures move by up to this much
  // (a target whose arithmetic depends on its batch)...
  double logprob_noise = 0;
  // ...and while a completion request of another key is being handled,
  // every figure moves by this much (what another tenant's page in
  // attention does to an answer whose text it does not change).
  double busy_logprob_shift = 0;
  // A healthy server that is not batch-invariant: with k other completion
  // requests (of any key) in flight, every figure moves by 1e-4 × k, and
  // where k >= 4 the answer's last word is another — the same answer for
  // the same batch shape, another for another.
  bool batch_variant = false;
  // > 0: once that many completion requests have arrived, `revoked_key`
  // is refused as if it were wrong (a key rotated or revoked mid-run).
  int revoke_after_completions = 0;
  std::string revoked_key;
  // > 0: every such completion request (the 3rd, 6th... for 3) is answered
  // 429 with OpenAI's rate_limit_exceeded error, as a provider's rate
  // limit does, with `Retry-After: retry_after_s` (< 0: no header).
  int rate_limit_every = 0;
  int retry_after_s = 1;
  // Chat rendered through a template, as real servers render it (Zephyr's
  // and TinyLlama's shape): a system header (kFakeChatHeader, 21 tokens
  // printing the date), the user's marker, the messages, then the
  // end-of-turn and the assistant's marker. The
  // template's tokens count in prompt_tokens, sit in the cache and count
  // toward the limit; the answer continues the messages' text alone (never
  // the header's date), as a model answers the user. false: messages joined by
  // newlines.
  bool chat_template = false;
  // > 0: once that many completion requests have arrived, the header's
  // date is the next day's, one token longer (kFakeChatHeaderNextDay): a
  // template that prints today's date, crossing midnight mid-campaign.
  int template_date_change_after = 0;
  // With chat_template: the answer's first word is the header's weekday
  // (" Wednesday", the next day " Thursday"), as a model that reads the
  // date greets with it: answers alone change when the date does.
  bool answer_names_date = false;
  // Chat as an instruction-tuned model answers: only a message that starts
  // with canaries::kRepeatExactly gets its tail back; every other message
  // (a story to continue, a nonce inside a story) gets filler words.
  bool instruction_model = false;
};

// `o` with no /v1/completions route and chat rendered through the
// template (chat_template): a server that serves only chat completions.
FakeTargetOptions ChatOnly(FakeTargetOptions o);

// The header chat_template puts before the messages, and the day after.
extern const char kFakeChatHeader[];
extern const char kFakeChatHeaderNextDay[];

// The fake's tokenizer: 1 (BOS) + each maximal run of ASCII letters/digits
// + each other byte that is not ASCII whitespace.
int FakeTokenCount(absl::string_view text);

// The context number the flavor advertises for `options.limit_tokens`:
// limit + 1 for vLLM (max_model_len), SGLang (context_length,
// max_model_len) and llama.cpp (n_ctx); limit for TGI (max_input_tokens;
// max_total_tokens is one more) and Ollama (num_ctx).
int AdvertisedContext(const FakeTargetOptions& options);

// Thread-safe. Serves from its own threads until Stop() or destruction.
class FakeTarget {
 public:
  explicit FakeTarget(FakeTargetOptions options);
  ~FakeTarget();
  FakeTarget(const FakeTarget&) = delete;
  FakeTarget& operator=(const FakeTarget&) = delete;

  std::string url() const;  // http://127.0.0.1:<port>
  int port() const { return port_; }
  const FakeTargetOptions& options() const { return options_; }
  int completions() const;           // completion requests received so far
  int cached_tokens_served() const;  // prompt tokens served from the cache
  // Completion requests whose prompt was cut (kKeepTail, kKeepHead,
  // kKeepHeadAndTail) so far.
  int truncated() const;
  void Stop();  // stop listening now; idempotent

 private:
  void Route();
  void HandleCompletion(const http::Request& req, http::Response& res,
                        bool chat);
  bool Authorized(const http::Request& req) const;
  bool Guard(const http::Request& req, http::Response& res) const;
  std::string SlotsJson() const;  // llama.cpp GET /slots
  // Looks the processed tokens up in the cache and adds them, the chain
  // of block keys starting from `salt` ("" for the shared cache); returns
  // how many were served from it.
  int CacheLookupAndInsert(const std::vector<std::string>& tokens,
                           const std::string& salt, bool report_all_blocks);
  // The cache salt of a request: its tenant (per_key_prompt_cache: the
  // key, or a gateway's header) and its body salt, per salt_mode.
  std::string CacheSalt(const http::Request& req,
                        const std::optional<std::string>& body) const;
  // Two tiers (gpu_tier_blocks > 0): how many leading blocks of `keys`
  // (GPU) / `cpu_keys` (the CPU tier's) hit; inserts them. REQUIRES: mu_.
  size_t TierLookupAndInsert(const std::vector<size_t>& keys,
                             const std::vector<size_t>& cpu_keys)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Time to the first token of a prompt with `uncached_tokens` to
  // compute: base_ms, the prefill, and the next jitter draw.
  double FirstTokenMs(int uncached_tokens);

  const FakeTargetOptions options_;
  std::unique_ptr<http::Server> server_;
  int port_ = 0;
  std::atomic<int> completions_{0};
  std::atomic<int> truncated_{0};
  std::atomic<int> in_flight_{0};  // completion requests being handled
  // The same, per Authorization value.
  std::map<std::string, int> in_flight_keys_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> truncations_{0};  // over-long prompts answered cut
  std::atomic<bool> stopped_{false};

  mutable std::mutex mu_;
  absl::flat_hash_set<size_t> cached_blocks_ ABSL_GUARDED_BY(mu_);
  std::deque<size_t> gpu_order_ ABSL_GUARDED_BY(mu_);  // oldest first
  std::map<size_t, size_t> gpu_to_cpu_key_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<size_t> cpu_blocks_ ABSL_GUARDED_BY(mu_);
  int cached_tokens_served_ ABSL_GUARDED_BY(mu_) = 0;
  int cache_requests_ ABSL_GUARDED_BY(mu_) = 0;   // for cache_replicas
  std::string last_prompt_ ABSL_GUARDED_BY(mu_);  // for llama.cpp /slots
  std::string last_output_ ABSL_GUARDED_BY(mu_);
  int last_prompt_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  // slot_prompt_reuse: the slot's last processed tokens.
  std::vector<std::string> slot_tokens_ ABSL_GUARDED_BY(mu_);
  std::mt19937_64 jitter_rng_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvcanary::auditor::testing

#endif  // KVCANARY_TESTS_AUDITOR_FAKE_TARGET_H_
