#include "tests/auditor/fakes/fake_target.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "canaries/templates.h"
#include "common/check.h"
#include "common/http_server.h"
#include "nlohmann/json.hpp"
#include "tests/auditor/fakes/fake_target_flavors.h"

namespace kvcanary::auditor::testing {

const char kFakeChatHeader[] =
    "<|system|>\nToday Date: 9 Dec 2026\nYou are a helpful assistant.</s>\n";
// The day after, its day written digit by digit: the fake's tokenizer
// runs digits together, Llama's splits them, so "10" is a token more
// than "9" there, as here.
const char kFakeChatHeaderNextDay[] =
    "<|system|>\nToday Date: 1 0 Dec 2026\nYou are a helpful "
    "assistant.</s>\n";
FakeTargetOptions ChatOnly(FakeTargetOptions o) {
  o.completions_route = CompletionsRoute::kAbsent;
  o.chat_template = true;
  return o;
}

namespace {

using canaries::kRepeatExactly;
using fake_target_internal::Answer;
using fake_target_internal::Body;
using fake_target_internal::json;
using fake_target_internal::kJson;
using fake_target_internal::LlamaMetricsOff;
using fake_target_internal::LlamaProps;
using fake_target_internal::MetricName;
using fake_target_internal::ModelsList;
using fake_target_internal::OllamaShow;
using fake_target_internal::OverLimitReply;
using fake_target_internal::OverLimitStream;
using fake_target_internal::Refusal;
using fake_target_internal::Reply;
using fake_target_internal::SglangModelInfo;
using fake_target_internal::SglangServerInfo;
using fake_target_internal::StreamEvents;
using fake_target_internal::TgiInfo;
using fake_target_internal::Unauthorized;

constexpr char kEventStream[] = "text/event-stream";
constexpr char kPrometheus[] = "text/plain; version=0.0.4";
constexpr char kText[] = "text/plain; charset=utf-8";
constexpr int kDefaultMaxTokens = 16;

// --- Tokenizer ---

struct Tok {
  size_t begin;  // byte offsets into the prompt
  size_t end;
};

std::vector<Tok> Tokenize(absl::string_view s) {
  std::vector<Tok> toks;
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    if (absl::ascii_isspace(c)) {
      ++i;
    } else if (c < 0x80 && absl::ascii_isalnum(c)) {
      const size_t begin = i;
      while (i < s.size() && static_cast<unsigned char>(s[i]) < 0x80 &&
             absl::ascii_isalnum(static_cast<unsigned char>(s[i]))) {
        ++i;
      }
      toks.push_back({begin, i});
    } else {
      toks.push_back({i, i + 1});
      ++i;
    }
  }
  return toks;
}

// --- Requests ---

struct Request {
  std::string prompt;
  int max_tokens = kDefaultMaxTokens;
  bool stream = false;
  bool include_usage = false;
  bool report_all_blocks = false;         // vLLM's kv_cache_report_mode "full"
  std::optional<std::string> cache_salt;  // the body's "cache_salt"
  int logprobs = -1;                      // alternatives asked for; -1: none
  bool echo = false;                      // completions' echo
  // Tokens at the start and the end of `prompt` the chat template put
  // there (the header and the user's marker; the assistant's marker):
  // processed, never continued by the answer.
  size_t template_head_tokens = 0, template_tail_tokens = 0;
};

// Returns the problem ("" if none) and fills *r. Chat messages are joined
// with "\n" (content strings, or the text parts of content arrays).
std::string ParseRequest(const std::string& body, bool chat, Flavor f,
                         Request* r) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return "invalid JSON body";
  if (chat) {
    auto it = j.find("messages");
    if (it == j.end() || !it->is_array() || it->empty()) {
      return "'messages' must be a non-empty array";
    }
    std::vector<std::string> parts;
    for (const json& m : *it) {
      if (!m.is_object() || !m.contains("content")) continue;
      const json& c = m["content"];
      if (c.is_string()) {
        parts.push_back(c.get<std::string>());
      } else if (c.is_array()) {
        for (const json& p : c) {
          if (p.is_object() && p.contains("type") && p["type"] == "text" &&
              p.contains("text") && p["text"].is_string()) {
            parts.push_back(p["text"].get<std::string>());
          }
        }
      }
    }
    r->prompt = absl::StrJoin(parts, "\n");
  } else {
    auto it = j.find("prompt");
    if (it != j.end() && it->is_array() && it->size() == 1) it = it->begin();
    if (it == j.end() || !it->is_string()) {
      return "'prompt' must be a string";
    }
    r->prompt = it->get<std::string>();
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_number_integer() || it->get<int64_t>() < 1) {
      return absl::StrCat("'", key, "' must be a positive integer");
    }
    r->max_tokens =
        static_cast<int>(std::min<int64_t>(it->get<int64_t>(), 1 << 20));
  }
  if (auto it = j.find("stream"); it != j.end() && it->is_boolean()) {
    r->stream = it->get<bool>();
  }
  auto so = j.find("stream_options");
  if (so != j.end() && so->is_object()) {
    // vLLM's StreamOptions defaults include_usage to true once
    // stream_options is given; the others default it to false.
    auto iu = so->find("include_usage");
    r->include_usage = iu != so->end() && iu->is_boolean() ? iu->get<bool>()
                                                           : f == Flavor::kVllm;
  }
  r->report_all_blocks = j.value("kv_cache_report_mode", "") == "full";
  if (auto it = j.find("logprobs"); it != j.end() && !it->is_null()) {
    // Completions: an integer; chat: a boolean with top_logprobs.
    if (it->is_number_integer()) {
      r->logprobs = static_cast<int>(it->get<int64_t>());
    } else if (it->is_boolean() && it->get<bool>()) {
      r->logprobs = j.value("top_logprobs", 0);
    }
  }
  r->echo = !chat && j.value("echo", false);
  if (auto it = j.find("cache_salt"); it != j.end() && !it->is_null()) {
    // vLLM's protocol: "Parameter 'cache_salt' must be a non-empty string
    // if provided." (docs/targets.md, "Cache salts").
    if (!it->is_string() || it->get<std::string>().empty()) {
      return "Parameter 'cache_salt' must be a non-empty string if provided.";
    }
    r->cache_salt = it->get<std::string>();
  }
  return "";
}

// What part of the prompt is processed: BOS and toks[first, last).
struct Plan {
  std::vector<Tok> toks;  // every prompt token, BOS not included
  int sent = 0;           // 1 + toks.size()
  bool over = false;      // refused (kReject, kErrorInStream)
  bool cut = false;       // processed in part (kKeep*)
  bool bos = true;
  size_t first = 0, last = 0;
  // kKeepHeadAndTail: toks[0, head) are kept too, before toks[first, last).
  size_t head = 0;
  int processed() const {
    return (bos ? 1 : 0) + static_cast<int>(head + last - first);
  }
};

// `limit`: the most prompt tokens processed now (options.limit_tokens, or
// busy_limit_tokens under load).
Plan MakePlan(absl::string_view prompt, const FakeTargetOptions& o, int limit) {
  Plan p;
  p.toks = Tokenize(prompt);
  p.sent = 1 + static_cast<int>(p.toks.size());
  p.last = p.toks.size();
  if (p.sent <= limit) return p;
  p.cut = o.over_limit != OverLimit::kReject &&
          o.over_limit != OverLimit::kErrorInStream;
  switch (o.over_limit) {
    case OverLimit::kReject:
    case OverLimit::kErrorInStream:
      p.over = true;
      break;
    case OverLimit::kKeepTail:  // BOS and the head dropped
      p.bos = false;
      p.first = p.toks.size() - limit;
      break;
    case OverLimit::kKeepHead:  // BOS and the first limit - 1 tokens kept
      p.last = limit - 1;
      break;
    case OverLimit::kKeepHeadAndTail: {
      // llama.cpp's context shift on a prompt: n_keep (BOS included), then
      // whole blocks of half the rest of the window dropped.
      const int n_ctx = limit + 1;
      const int n_keep = std::clamp(o.keep_head_tokens, 1, n_ctx / 2);
      const int block = (n_ctx - n_keep) / 2;
      const int erased = (p.sent - n_keep - block) / block;
      p.head = static_cast<size_t>(n_keep - 1);  // BOS is one of n_keep
      p.first = p.head + static_cast<size_t>(erased * block);
      break;
    }
  }
  return p;
}

// --- Answers ---

// The tokens processed, as text, BOS first where kept: what the cache keys.
std::vector<std::string> ProcessedTokens(absl::string_view prompt,
                                         const Plan& plan) {
  std::vector<std::string> tokens;
  if (plan.bos) tokens.push_back("\x02<s>");
  auto add = [&](size_t i) {
    const Tok& t = plan.toks[i];
    tokens.emplace_back(prompt.substr(t.begin, t.end - t.begin));
  };
  for (size_t i = 0; i < plan.head; ++i) add(i);
  for (size_t i = plan.first; i < plan.last; ++i) add(i);
  return tokens;
}

// The user's messages as chat_template renders them (Zephyr's and
// TinyLlama's shape).
constexpr char kFakeUserMarker[] = "<|user|>\n";
constexpr char kFakeAssistantMarker[] = "</s>\n<|assistant|>\n";

void RenderChatTemplate(Request* r, bool next_day) {
  r->prompt = absl::StrCat(next_day ? kFakeChatHeaderNextDay : kFakeChatHeader,
                           kFakeUserMarker, r->prompt, kFakeAssistantMarker);
  r->template_head_tokens =
      Tokenize(absl::StrCat(next_day ? kFakeChatHeaderNextDay : kFakeChatHeader,
                            kFakeUserMarker))
          .size();
  r->template_tail_tokens = Tokenize(kFakeAssistantMarker).size();
}

// The tail of the processed prompt, or filler words.
std::vector<std::string> OutputPieces(absl::string_view prompt, const Plan& p,
                                      int max_tokens, bool echo) {
  std::vector<std::string> pieces;
  const size_t n = p.last - p.first;
  if (echo && n > 0) {
    const size_t k = std::min<size_t>(n, max_tokens);
    const size_t start = p.last - k;
    for (size_t i = start; i < p.last; ++i) {
      const Tok& t = p.toks[i];
      const std::string gap =
          i == start ? " "
                     : std::string(prompt.substr(p.toks[i - 1].end,
                                                 t.begin - p.toks[i - 1].end));
      pieces.push_back(
          absl::StrCat(gap, prompt.substr(t.begin, t.end - t.begin)));
    }
    return pieces;
  }
  // No word of MarkerWordList(): a filler answer never echoes a nonce or
  // carries a marker word by chance (with "fox" and "dog", about one
  // 4-word nonce in 32 was "echoed" by filler).
  static constexpr const char* kFiller[] = {"the",   "quick", "brown", "one",
                                            "jumps", "over",  "lazy",  "days"};
  for (int i = 0; i < max_tokens; ++i) {
    pieces.push_back(absl::StrCat(" ", kFiller[i % 8]));
  }
  return pieces;
}

void SendEvents(http::Response& res, std::vector<std::string> events,
                double delay_ms) {
  res.status = 200;
  struct State {
    std::vector<std::string> events;
    size_t next = 0;
  };
  auto state = std::make_shared<State>();
  state->events = std::move(events);
  res.set_chunked_content_provider(
      kEventStream, [state, delay_ms](size_t, http::DataSink& sink) {
        if (state->next == 0 && delay_ms > 0) {  // prefill, then 1st chunk
          std::this_thread::sleep_for(
              std::chrono::microseconds(static_cast<int64_t>(delay_ms * 1000)));
        }
        if (state->next < state->events.size()) {
          const std::string& e = state->events[state->next++];
          sink.write(e.data(), e.size());
        }
        if (state->next >= state->events.size()) sink.done();
        return true;
      });
}

void SendReply(http::Response& res, const Reply& r) {
  res.status = r.status;
  if (!r.body.empty()) res.set_content(r.body, r.content_type);
}

// A figure for `text` at `position`: a function of the two (FNV-1a), in
// (-10, 0), moved by `shift`.
double FakeFigure(absl::string_view text, size_t position, double shift) {
  uint64_t h = 1469598103934665603ull ^ position;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return -0.01 - static_cast<double>(h % 997) / 100.0 + shift;
}

// choices[0].logprobs in the flavor's shape for the prompt's positions
// (`prompt`: echo's, vLLM's first figure null) and the output's, `top`
// alternatives each (the token itself first, then fillers).
json FakeLogprobs(Flavor f, const std::vector<std::string>& prompt,
                  const std::vector<std::string>& output, int top,
                  double shift) {
  std::vector<std::string> all = prompt;
  all.insert(all.end(), output.begin(), output.end());
  if (f == Flavor::kLlamaCpp) {
    json content = json::array();
    for (size_t i = 0; i < all.size(); ++i) {
      const double lp = FakeFigure(all[i], i, shift);
      json alts = json::array();
      for (int k = 0; k < top; ++k) {
        const std::string t = k == 0 ? all[i] : absl::StrCat(" alt", k);
        alts.push_back({{"id", k}, {"token", t}, {"logprob", lp - k}});
      }
      content.push_back({{"id", i},
                         {"token", all[i]},
                         {"logprob", lp},
                         {"top_logprobs", std::move(alts)}});
    }
    return {{"content", std::move(content)}};
  }
  json tokens = json::array(), figures = json::array(), tops = json::array(),
       offsets = json::array();
  size_t offset = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const double lp = FakeFigure(all[i], i, shift);
    tokens.push_back(all[i]);
    offsets.push_back(offset);
    offset += all[i].size();
    if (i == 0 && !prompt.empty()) {
      figures.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    figures.push_back(lp);
    json alts = {{all[i], lp}};
    for (int k = 1; k < top; ++k) alts[absl::StrCat(" alt", k)] = lp - k;
    tops.push_back(std::move(alts));
  }
  return {{"text_offset", offsets},
          {"token_logprobs", figures},
          {"tokens", tokens},
          {"top_logprobs", tops}};
}

// Adds the flavor's log-probabilities to a whole answer that asked for
// them (vLLM and SGLang echo the prompt's text first); false when the
// request was answered with the flavor's refusal instead (llama.cpp: echo).
bool AddLogprobs(const FakeTargetOptions& o, const Request& r, double shift,
                 Answer* a, http::Response& res) {
  const Flavor f = o.flavor;
  const bool serves =
      o.serves_logprobs && !r.stream &&
      (f == Flavor::kVllm || f == Flavor::kSglang || f == Flavor::kLlamaCpp);
  if (!serves) return true;
  if (r.echo && f == Flavor::kLlamaCpp) {
    // A std::runtime_error in oaicompat_completion_params_parse: a 500.
    SendReply(res, {500, R"({"error":{"code":500,"message":"Only no echo is )"
                         R"(supported","type":"server_error"}})"});
    return false;
  }
  std::vector<std::string> prompt;
  if (r.echo) {
    for (const Tok& t : Tokenize(r.prompt)) {
      prompt.push_back(r.prompt.substr(t.begin, t.end - t.begin));
    }
    a->text = r.prompt + a->text;
  }
  a->logprobs =
      FakeLogprobs(f, prompt, a->pieces, std::max(1, r.logprobs), shift);
  return true;
}

}  // namespace

// --- Public functions ---

absl::string_view FlavorName(Flavor flavor) {
  static constexpr absl::string_view kNames[] = {"vllm", "sglang", "llama.cpp",
                                                 "tgi", "ollama"};
  return kNames[static_cast<int>(flavor)];
}

int FakeTokenCount(absl::string_view text) {
  return 1 + static_cast<int>(Tokenize(text).size());
}

int AdvertisedContext(const FakeTargetOptions& options) {
  const Flavor f = options.flavor;
  const bool window_holds_output =
      f == Flavor::kVllm || f == Flavor::kSglang || f == Flavor::kLlamaCpp;
  return options.limit_tokens + (window_holds_output ? 1 : 0);
}

FakeTarget::FakeTarget(FakeTargetOptions options)
    : options_(std::move(options)),
      server_(std::make_unique<http::Server>()),
      jitter_rng_(options_.jitter_seed) {
  CHECK(options_.limit_tokens >= 1);
  CHECK(options_.cache_block_tokens >= 1);
  CHECK(!(options_.shared_prompt_cache && options_.per_key_prompt_cache))
      << "one prompt cache mode at a time";
  Route();
  auto port = server_->Bind("127.0.0.1", 0);
  CHECK(port.ok()) << "cannot bind a loopback port: " << port.status();
  port_ = *port;
  server_->Start();
}

FakeTarget::~FakeTarget() { server_->Stop(); }

std::string FakeTarget::url() const {
  return absl::StrCat("http://127.0.0.1:", port_);
}

int FakeTarget::completions() const { return completions_.load(); }

int FakeTarget::truncated() const { return truncated_.load(); }

int FakeTarget::cached_tokens_served() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_tokens_served_;
}

void FakeTarget::Stop() {
  // From a handler too (die_after_completions): the request being handled
  // is still answered.
  if (!stopped_.exchange(true)) server_->StopListening();
}

bool FakeTarget::Authorized(const http::Request& req) const {
  if (options_.api_keys.empty()) return true;
  std::string value = req.get_header_value("Authorization");
  const bool llama = options_.flavor == Flavor::kLlamaCpp;
  if (value.empty() && llama) value = req.get_header_value("X-Api-Key");
  absl::string_view key = value;
  if (absl::StartsWithIgnoreCase(key, "Bearer ")) {
    key.remove_prefix(7);
  } else if (!llama) {  // llama.cpp also takes the bare key
    return false;
  }
  if (options_.revoke_after_completions > 0 && key == options_.revoked_key &&
      completions_.load() > options_.revoke_after_completions) {
    return false;
  }
  return options_.api_keys.count(std::string(key)) > 0;
}

bool FakeTarget::Guard(const http::Request& req, http::Response& res) const {
  if (Authorized(req)) return true;
  SendReply(res, Unauthorized(options_.flavor));
  return false;
}

std::string FakeTarget::CacheSalt(
    const http::Request& req, const std::optional<std::string>& body) const {
  // Per key: salted by the whole Authorization value ("-" for none), so
  // requests without a key share one cache of their own; a gateway's
  // header, where set and sent, names the tenant instead.
  std::string tenant;
  if (options_.per_key_prompt_cache) {
    tenant = absl::StrCat("-", req.get_header_value("Authorization"));
    if (!options_.tenant_header.empty() &&
        req.has_header(options_.tenant_header)) {
      tenant = absl::StrCat("h|", req.get_header_value(options_.tenant_header));
    }
  }
  if (!body.has_value()) return tenant;
  switch (options_.salt_mode) {
    case SaltMode::kIgnore:
      return tenant;
    case SaltMode::kVllm:  // the salt alone: no tenant in it
      return absl::StrCat("s|", *body);
    case SaltMode::kScoped:
      return absl::StrCat(tenant, "|s|", *body);
  }
  return tenant;
}

namespace {

// The chained block keys of `tokens` from `salt` ("" for the shared cache).
std::vector<size_t> BlockKeys(const std::vector<std::string>& tokens,
                              size_t block, const std::string& salt) {
  std::vector<size_t> keys;  // chained: each block's key covers the prefix
  size_t key = salt.empty() ? 0x9e3779b97f4a7c15ULL
                            : std::hash<std::string>()("salt|" + salt);
  for (size_t b = 0; b < tokens.size() / block; ++b) {
    std::string s = absl::StrCat(key, "|");
    for (size_t i = b * block; i < (b + 1) * block; ++i) {
      absl::StrAppend(&s, tokens[i], "\x1f");
    }
    key = std::hash<std::string>()(s);
    keys.push_back(key);
  }
  return keys;
}

}  // namespace

size_t FakeTarget::TierLookupAndInsert(const std::vector<size_t>& keys,
                                       const std::vector<size_t>& cpu_keys) {
  size_t hits = 0;
  while (hits < keys.size() && (cached_blocks_.contains(keys[hits]) ||
                                cpu_blocks_.contains(cpu_keys[hits]))) {
    ++hits;
  }
  // Every block lands in the GPU tier (a CPU hit is promoted); what the
  // GPU tier evicts spills to the CPU tier under the CPU tier's key.
  for (size_t b = 0; b < keys.size(); ++b) {
    if (!cached_blocks_.insert(keys[b]).second) continue;
    gpu_order_.push_back(keys[b]);
    gpu_to_cpu_key_[keys[b]] = cpu_keys[b];
    while (gpu_order_.size() > static_cast<size_t>(options_.gpu_tier_blocks)) {
      const size_t k = gpu_order_.front();
      gpu_order_.pop_front();
      cached_blocks_.erase(k);
      cpu_blocks_.insert(gpu_to_cpu_key_[k]);
      gpu_to_cpu_key_.erase(k);
    }
  }
  return hits;
}

int FakeTarget::CacheLookupAndInsert(const std::vector<std::string>& tokens,
                                     const std::string& salt,
                                     bool report_all_blocks) {
  const size_t block = options_.cache_block_tokens;
  const std::vector<size_t> keys = BlockKeys(tokens, block, salt);
  size_t hits = 0, seen = 0;
  int replica = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    replica = cache_requests_++ % std::max(1, options_.cache_replicas);
    // Each replica's cache apart: its keys mixed with its index.
    const size_t mix = static_cast<size_t>(replica) * 0x9e3779b97f4a7c15ULL;
    if (options_.gpu_tier_blocks > 0) {
      hits = TierLookupAndInsert(keys, options_.cpu_tier_drops_salt
                                           ? BlockKeys(tokens, block, "")
                                           : keys);
    }
    while (options_.gpu_tier_blocks == 0 && hits < keys.size() &&
           cached_blocks_.contains(keys[hits] ^ mix))
      ++hits;
    seen = hits;
    // As vLLM: the last token must be computed, so a fully cached prompt
    // recomputes its last block.
    if (hits > 0 && hits * block == tokens.size()) --hits;
    if (options_.gpu_tier_blocks == 0) {
      for (size_t k : keys) cached_blocks_.insert(k ^ mix);
    }
    cached_tokens_served_ += static_cast<int>(hits * block);
  }
  if (options_.on_blocks_stored && replica == 0) {
    const std::vector<size_t> event_keys =
        options_.events_ignore_salt ? BlockKeys(tokens, block, "") : keys;
    std::vector<FakeTargetOptions::StoredBlock> stored;
    const bool all = options_.events_report_hits || report_all_blocks;
    for (size_t b = all ? 0 : seen; b < keys.size(); ++b) {
      FakeTargetOptions::StoredBlock s;
      s.hash = event_keys[b];
      if (b > 0) s.parent = event_keys[b - 1];
      for (size_t i = b * block; i < (b + 1) * block; ++i) {
        s.token_ids.push_back(static_cast<int64_t>(
            std::hash<std::string>()(tokens[i]) >> 2));  // the token's id
      }
      stored.push_back(std::move(s));
    }
    if (!stored.empty()) options_.on_blocks_stored(stored);
  }
  return static_cast<int>(hits * block);
}

void FakeTarget::HandleCompletion(const http::Request& req, http::Response& res,
                                  bool chat) {
  // In flight before counted: a request counted is one being handled.
  const int others = in_flight_++;
  const int n = ++completions_;
  const std::string key = req.get_header_value("Authorization");
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++in_flight_keys_[key];
  }
  struct Leave {
    FakeTarget* t;
    const std::string& key;
    ~Leave() {
      --t->in_flight_;
      std::lock_guard<std::mutex> lock(t->mu_);
      --t->in_flight_keys_[key];
    }
  } leave{this, key};
  if (options_.die_after_completions > 0 &&
      n >= options_.die_after_completions) {
    Stop();  // this request is still answered; new connections are refused
  }
  if (!Guard(req, res)) return;
  if (options_.rate_limit_every > 0 && n % options_.rate_limit_every == 0) {
    if (options_.retry_after_s >= 0) {
      res.set_header("Retry-After", std::to_string(options_.retry_after_s));
    }
    SendReply(res,
              {429, R"({"error":{"message":"Rate limit reached for requests",)"
                    R"("type":"requests","param":null,)"
                    R"("code":"rate_limit_exceeded"}})"});
    return;
  }
  if (chat && options_.chat_like_reasoning_models) {
    const json j = json::parse(req.body, nullptr, false);
    if (j.is_object() && j.contains("max_tokens")) {
      SendReply(res, Refusal(options_.flavor,
                             "Unsupported parameter: 'max_tokens' is not "
                             "supported with this model. Use "
                             "'max_completion_tokens' instead."));
      return;
    }
    if (j.is_object() && j.contains("temperature") && j["temperature"] != 1) {
      SendReply(res, Refusal(options_.flavor,
                             "Unsupported value: 'temperature' does not "
                             "support 0 with this model. Only the default "
                             "(1) value is supported."));
      return;
    }
  }
  Request r;
  if (std::string problem = ParseRequest(req.body, chat, options_.flavor, &r);
      !problem.empty()) {
    SendReply(res, Refusal(options_.flavor, problem));
    return;
  }
  const bool told_to_repeat = absl::StartsWith(r.prompt, kRepeatExactly);
  const bool next_day = options_.template_date_change_after > 0 &&
                        n > options_.template_date_change_after;
  if (chat && options_.chat_template) RenderChatTemplate(&r, next_day);
  const bool busy = options_.busy_limit_tokens > 0 && others > 0;
  const Plan plan =
      MakePlan(r.prompt, options_,
               busy ? options_.busy_limit_tokens : options_.limit_tokens);
  if (plan.over) {
    const bool in_stream =
        r.stream && (options_.over_limit == OverLimit::kErrorInStream ||
                     options_.flavor == Flavor::kTgi);
    if (!in_stream) {
      SendReply(res, OverLimitReply(options_, plan.sent));
    } else {
      SendEvents(res, OverLimitStream(options_, plan.sent, chat), 0);
    }
    return;
  }

  if (plan.cut) ++truncated_;
  if (options_.die_after_truncations > 0 && plan.processed() < plan.sent &&
      ++truncations_ >= options_.die_after_truncations) {
    Stop();  // this answer is still sent; new connections are refused
  }
  Answer a;
  a.prompt_tokens = plan.processed();
  if (options_.shared_prompt_cache || options_.per_key_prompt_cache) {
    const std::vector<std::string> tokens = ProcessedTokens(r.prompt, plan);
    a.cached_tokens = CacheLookupAndInsert(tokens, CacheSalt(req, r.cache_salt),
                                           r.report_all_blocks);
  }
  if (options_.slot_prompt_reuse) {
    std::vector<std::string> tokens = ProcessedTokens(r.prompt, plan);
    std::lock_guard<std::mutex> lock(mu_);
    size_t common = 0;
    while (common < tokens.size() && common < slot_tokens_.size() &&
           tokens[common] == slot_tokens_[common]) {
      ++common;
    }
    if (!tokens.empty()) common = std::min(common, tokens.size() - 1);
    if (static_cast<int>(common) > a.cached_tokens) {
      cached_tokens_served_ += static_cast<int>(common) - a.cached_tokens;
      a.cached_tokens = static_cast<int>(common);
    }
    slot_tokens_ = std::move(tokens);
  }
  // The answer continues the messages, never the template's tokens.
  Plan spoken = plan;
  spoken.last -= std::min(spoken.last - spoken.first, r.template_tail_tokens);
  spoken.first =
      std::max(spoken.first, std::min(spoken.last, r.template_head_tokens));
  a.pieces =
      OutputPieces(r.prompt, spoken, r.max_tokens,
                   options_.echo && (!chat || !options_.instruction_model ||
                                     told_to_repeat));
  if (chat && options_.chat_template && options_.answer_names_date &&
      !a.pieces.empty()) {
    a.pieces[0] = next_day ? " Thursday" : " Wednesday";
  }
  if (options_.batch_variant && others >= 4 && !a.pieces.empty()) {
    a.pieces.back() = " then";
  }
  a.text = absl::StrJoin(a.pieces, "");
  if (r.logprobs >= 0) {
    double shift = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const int own = in_flight_keys_[req.get_header_value("Authorization")];
      if (others + 1 > own) shift = options_.busy_logprob_shift;
      if (options_.batch_variant) shift += 1e-4 * others;
      if (options_.logprob_noise > 0) {
        shift += options_.logprob_noise *
                 std::uniform_real_distribution<double>(0, 1)(jitter_rng_);
      }
    }
    if (!AddLogprobs(options_, r, shift, &a, res)) return;
  }
  a.finish_reason =
      static_cast<int>(a.pieces.size()) == r.max_tokens ? "length" : "stop";
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_prompt_ = r.prompt;
    last_output_ = a.text;
    last_prompt_tokens_ = a.prompt_tokens;
  }
  const double ttft_ms = FirstTokenMs(a.prompt_tokens - a.cached_tokens);
  const std::string id =
      absl::StrCat(chat ? "chatcmpl-fake-" : "cmpl-fake-", n);
  const int64_t created = absl::ToUnixSeconds(absl::Now());
  if (!r.stream) {
    std::this_thread::sleep_for(
        std::chrono::microseconds(static_cast<int64_t>(ttft_ms * 1000)));
    res.set_content(Body(options_, chat, id, created, a, ttft_ms).dump(),
                    kJson);
    return;
  }
  SendEvents(
      res,
      StreamEvents(options_, chat, id, created, a, r.include_usage, ttft_ms),
      ttft_ms);
}

double FakeTarget::FirstTokenMs(int uncached_tokens) {
  const double ms = options_.base_ms +
                    uncached_tokens * options_.prefill_us_per_token / 1000.0;
  if (options_.ttft_jitter_ms <= 0) return ms;
  std::exponential_distribution<double> jitter(1.0 / options_.ttft_jitter_ms);
  std::lock_guard<std::mutex> lock(mu_);
  return ms + jitter(jitter_rng_);
}

std::string FakeTarget::SlotsJson() const {
  json slot = {{"id", 0},
               {"n_ctx", AdvertisedContext(options_)},
               {"speculative", false},
               {"is_processing", false}};
  std::lock_guard<std::mutex> lock(mu_);
  if (completions() > 0) {
    slot["id_task"] = completions();
    slot["n_prompt_tokens"] = last_prompt_tokens_;
    if (options_.slots_expose_prompts) {
      slot["prompt"] = last_prompt_;
      slot["generated"] = last_output_;
    }
  }
  return json::array({slot}).dump();
}

void FakeTarget::Route() {
  const Flavor f = options_.flavor;
  if (options_.completions_route != CompletionsRoute::kAbsent) {
    server_->Post("/v1/completions",
                  [this](const http::Request& req, http::Response& res) {
                    HandleCompletion(req, res, /*chat=*/false);
                  });
  }
  server_->Post("/v1/chat/completions",
                [this](const http::Request& req, http::Response& res) {
                  HandleCompletion(req, res, /*chat=*/true);
                });
  // The GET endpoints: path, whether the real server wants the key there
  // (docs/targets.md "Authentication"), and the answer.
  struct Page {
    std::string path;
    bool guarded;
    std::function<Reply()> answer;
  };
  auto ok = [](const json& j) { return Reply{200, j.dump()}; };
  const Page health = {"/health", false, [] { return Reply{200, ""}; }};
  const Page metrics = {
      "/metrics", false, [this, f] {
        return Reply{200, absl::StrCat(MetricName(f), " ", completions(), "\n"),
                     kPrometheus};
      }};
  std::vector<Page> pages = {
      {"/v1/models", options_.models_needs_key, [this, ok] {
         return ok(ModelsList(options_, absl::ToUnixSeconds(absl::Now())));
       }}};
  switch (f) {
    case Flavor::kVllm:  // /health and /metrics are in PUBLIC_ENDPOINTS
      pages.insert(pages.end(), {health, metrics});
      break;
    case Flavor::kSglang:  // all but /health* and /metrics need the key
      pages.insert(pages.end(), {health, metrics});
      pages.push_back({"/get_model_info", true,
                       [this, ok] { return ok(SglangModelInfo(options_)); }});
      pages.push_back({"/get_server_info", true,
                       [this, ok] { return ok(SglangServerInfo(options_)); }});
      break;
    case Flavor::kLlamaCpp:  // public: /health, /v1/health, /models, /v1/models
      pages.push_back({"/health", false, [ok] {
                         return ok({{"status", "ok"}});
                       }});
      pages.push_back(
          {"/props", true, [this, ok] { return ok(LlamaProps(options_)); }});
      pages.push_back({"/slots", true, [this] {
                         return Reply{200, SlotsJson()};
                       }});
      pages.push_back({"/metrics", true, [] { return LlamaMetricsOff(); }});
      break;
    case Flavor::kTgi:  // /health, /metrics, /info: TGI's unguarded info_routes
      pages.insert(pages.end(), {health, metrics});
      pages.push_back(
          {"/info", false, [this, ok] { return ok(TgiInfo(options_)); }});
      break;
    case Flavor::kOllama:  // no /health and no keys; "/" answers
      pages.push_back({"/", false, [] {
                         return Reply{200, "Ollama is running", kText};
                       }});
      server_->Post("/api/show",
                    [this](const http::Request& req, http::Response& res) {
                      if (Guard(req, res))
                        SendReply(res, {200, OllamaShow(options_).dump()});
                    });
      break;
  }
  for (const Page& p : pages) {
    server_->Get(p.path,
                 [this, p](const http::Request& req, http::Response& res) {
                   if (!p.guarded || Guard(req, res))
                     SendReply(res, p.answer());
                 });
  }
}

}  // namespace kvcanary::auditor::testing
