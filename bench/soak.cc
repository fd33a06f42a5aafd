// kvcanary-soak: a long, clean multi-tenant load against a running `up`
// (issue 12), with the checks that make it a soak rather than a benchmark.
//
//   kvcanary-soak --target URL --tenants FILE --decode URL --prefill URL
//                 (--up-pid PID | --router-pid P --prefill-pid P
//                  --decode-pid P) [--requests 100000 --clients 32
//                 --disconnect-fraction 0.1 --max-prompt-tokens 0 --seed 1
//                 --json FILE]
//
// Each client thread sends requests of a random tenant of the tenants file:
// prompts of single-token words, uniform in length up to the router's prompt
// limit (GET /version), 5 % exactly at it and 5 % over it (these must get
// 400); max_tokens 1..16; a quarter of them chat; half streamed, and
// `--disconnect-fraction` of all requests streamed and hung up on after the
// first chunk (the socket is closed). Every `--sample-interval-s` it samples
// each process's RSS, the nodes' used KV pages and watermark violations, and
// requests/s; after the load it waits for the nodes' used pages to reach 0.
//
// Exit 0 only if: no watermark violation, 0 used pages on both nodes at the
// end, no 5xx (nor an error event inside a 200 stream), every over-limit
// prompt got 400 and no other prompt did, no transport error, no restart,
// and memory is flat: each process's RSS at the end <= max(1.25 x B,
// B + 32 MiB), B its RSS after the first 10 % of requests. Exit 1 otherwise,
// 2 if it could not run.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/soak_sampler.h"
#include "common/file.h"
#include "common/status_macros.h"
#include "common/tenants_file.h"
#include "common/text_table.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, target, "", "the router's URL");
ABSL_FLAG(std::string, tenants, "", "tenants JSON file (docs/api.md)");
ABSL_FLAG(std::string, decode, "", "the decode node's URL (for /metrics)");
ABSL_FLAG(std::string, prefill, "", "the prefill node's URL (for /metrics)");
ABSL_FLAG(int, up_pid, 0, "pid of `kvcanary-engine up`: its children by role");
ABSL_FLAG(int, router_pid, 0, "router pid (without --up-pid)");
ABSL_FLAG(int, prefill_pid, 0, "prefill node pid (without --up-pid)");
ABSL_FLAG(int, decode_pid, 0, "decode node pid (without --up-pid)");
ABSL_FLAG(int, requests, 100000, "requests in all");
ABSL_FLAG(int, clients, 32, "concurrent client threads");
ABSL_FLAG(double, disconnect_fraction, 0.10,
          "requests streamed and hung up on after the first chunk");
ABSL_FLAG(int, max_prompt_tokens, 0,
          "prompt limit to draw lengths against; 0: the router's, from "
          "GET /version");
ABSL_FLAG(uint64_t, seed, 1, "request i's plan is drawn from (seed, i)");
ABSL_FLAG(int, sample_interval_s, 10, "seconds between samples");
ABSL_FLAG(int, drain_timeout_s, 10, "how long to wait for used pages to be 0");
ABSL_FLAG(std::string, json, "", "also write samples and summary here");

namespace kvcanary::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxTokens = 16;
constexpr int kPreambleWords = 48;  // 3 pages of 16 tokens: cacheable
constexpr int kPreamblesPerTenant = 4;
constexpr long kSlackKib = 32 * 1024;  // memory rule: B + 32 MiB

// Candidate prompt words; those the target tokenizes as one token each
// (checked at start) make prompts whose length in tokens is known.
constexpr const char* kCandidateWords[] = {
    "the",  "a",    "and",  "to",   "was",  "he",   "she",  "it",
    "of",   "in",   "they", "her",  "his",  "said", "with", "you",
    "on",   "for",  "day",  "big",  "time", "play", "dog",  "cat",
    "tree", "park", "sun",  "home", "ball", "girl", "boy",  "little"};

struct Tenant {
  std::string id;
  std::string key;
};

struct Target {
  std::string router;
  int prompt_limit = 0;            // router's max_prompt_tokens (BOS included)
  int context = 0;                 // max_model_len
  int draw_limit = 0;              // lengths are drawn against this
  std::vector<std::string> words;  // one token each
};

// One request, drawn from (seed, index) alone.
struct Plan {
  int tenant = 0;
  int prompt_tokens = 0;  // intended, BOS included
  int max_tokens = 1;
  bool chat = false;
  bool stream = false;
  bool disconnect = false;
  std::string body;
};

// Counters shared by the client threads (atomics: thread-safe).
struct Counts {
  std::atomic<long> done{0}, ok{0}, bad_request{0}, too_many{0},
      server_error{0}, other_status{0}, disconnected{0}, transport_error{0},
      stream_error{0}, over_limit_sent{0}, over_limit_400{0}, in_limit_400{0},
      served_over_limit{0}, token_estimate_off{0};
};

// Abseil wants --max_prompt_tokens; the engine's CLI also takes dashes.
void DashesToUnderscores(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--", 2) != 0) continue;
    for (char* c = argv[i] + 2; *c != '\0' && *c != '='; ++c)
      if (*c == '-') *c = '_';
  }
}

// The tenants and their first keys (common/tenants_file.h); an error
// names the file and the problem.
absl::StatusOr<std::vector<Tenant>> ReadTenants(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<TenantsFileEntry> entries,
                   ReadTenantsFile(path, TenantsFileOptions{}));
  std::vector<Tenant> tenants;
  for (TenantsFileEntry& e : entries) {
    tenants.push_back({std::move(e.id), std::move(e.api_keys.front())});
  }
  return tenants;
}

httplib::Headers Auth(const Tenant& t) {
  return {{"Authorization", "Bearer " + t.key}};
}

// The limits from GET /version and the words that are one token each.
bool ReadTarget(const Tenant& tenant, Target* target) {
  httplib::Client c(target->router);
  c.set_read_timeout(30, 0);
  auto res = c.Get("/version", Auth(tenant));
  if (!res || res->status != 200) return false;
  auto v = nlohmann::json::parse(res->body, nullptr, false);
  if (!v.is_object() || !v["max_prompt_tokens"].is_number()) return false;
  target->prompt_limit = v["max_prompt_tokens"].get<int>();
  target->context = v["max_model_len"].get<int>();
  const int flag = absl::GetFlag(FLAGS_max_prompt_tokens);
  target->draw_limit = flag > 0 ? flag : target->prompt_limit;
  constexpr int kRepeats = 16;
  for (const char* word : kCandidateWords) {
    std::vector<std::string> words(kRepeats, word);
    nlohmann::json j = {{"prompt", absl::StrJoin(words, " ")},
                        {"max_tokens", 1}};
    auto r =
        c.Post("/v1/completions", Auth(tenant), j.dump(), "application/json");
    if (!r || r->status != 200) return false;
    auto body = nlohmann::json::parse(r->body, nullptr, false);
    if (body.is_object() &&
        body["usage"]["prompt_tokens"].get<int>() == kRepeats + 1)
      target->words.push_back(word);
  }
  return !target->words.empty();
}

std::string Words(const Target& target, std::mt19937_64& rng, int n) {
  std::uniform_int_distribution<size_t> pick(0, target.words.size() - 1);
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += target.words[pick(rng)];
  }
  return s;
}

// Tenant t's preamble p: the same words every time, so it hits the prefix
// cache of its own tenant (and, with --prefix-cache=tenant, only there).
std::string Preamble(const Target& target, uint64_t seed, int t, int p) {
  std::mt19937_64 rng(seed ^ (0x9e3779b97f4a7c15ull * (t * 16 + p + 1)));
  return Words(target, rng, kPreambleWords);
}

Plan MakePlan(const Target& target, size_t tenants, uint64_t seed, long i) {
  std::mt19937_64 rng(seed * 1000003 + i);
  std::uniform_real_distribution<double> u(0, 1);
  Plan p;
  p.tenant = std::uniform_int_distribution<int>(0, tenants - 1)(rng);
  const double length = u(rng);
  const int limit = target.draw_limit;
  if (length < 0.05) {
    p.prompt_tokens = limit;
  } else if (length < 0.10) {
    p.prompt_tokens = limit + std::uniform_int_distribution<int>(1, 32)(rng);
  } else {
    p.prompt_tokens = std::uniform_int_distribution<int>(1, limit)(rng);
  }
  const bool over = p.prompt_tokens > target.prompt_limit;
  p.disconnect = !over && u(rng) < absl::GetFlag(FLAGS_disconnect_fraction);
  p.stream = p.disconnect || u(rng) < 0.5;
  p.chat = u(rng) < 0.25;
  // A disconnect leaves tokens to cancel; the context bounds the rest.
  p.max_tokens =
      std::uniform_int_distribution<int>(p.disconnect ? 8 : 1, kMaxTokens)(rng);
  if (!over)
    p.max_tokens =
        std::max(1, std::min(p.max_tokens, target.context - p.prompt_tokens));
  int words = p.prompt_tokens - 1;  // BOS
  std::string prompt;
  if (words >= kPreambleWords && u(rng) < 0.3) {
    const int which =
        std::uniform_int_distribution<int>(0, kPreamblesPerTenant - 1)(rng);
    prompt = Preamble(target, seed, p.tenant, which);
    words -= kPreambleWords;
    if (words > 0) prompt += ' ';
  }
  prompt += Words(target, rng, words);
  nlohmann::json j = {{"max_tokens", p.max_tokens},
                      {"temperature", u(rng) < 0.5 ? 0.0 : 0.8},
                      {"seed", rng() >> 1},
                      {"stream", p.stream}};
  if (p.chat) {
    j["messages"] = {{{"role", "user"}, {"content", prompt}}};
  } else {
    j["prompt"] = prompt;
  }
  p.body = j.dump();
  return p;
}

// The usage.prompt_tokens of a JSON answer or of a stream's last chunk;
// -1 if there is none.
int PromptTokens(const std::string& body, bool stream) {
  std::string json = body;
  if (stream) {
    const size_t end = body.rfind("\"usage\"");
    if (end == std::string::npos) return -1;
    const size_t start = body.rfind("data: ", end);
    json = body.substr(start + 6, body.find('\n', end) - start - 6);
  }
  auto j = nlohmann::json::parse(json, nullptr, false);
  if (!j.is_object() || !j["usage"].is_object()) return -1;
  return j["usage"]["prompt_tokens"].get<int>();
}

// Sends one request and counts how it ended.
void Run(httplib::Client& client, const Tenant& tenant, const Plan& plan,
         const Target& target, Counts* counts) {
  httplib::Request req;
  req.method = "POST";
  req.path = plan.chat ? "/v1/chat/completions" : "/v1/completions";
  req.headers = Auth(tenant);
  req.set_header("Content-Type", "application/json");
  req.body = plan.body;
  int status = 0;
  std::string body;
  bool hung_up = false;
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    body.append(data, n);
    if (plan.disconnect && status == 200) return !(hung_up = true);
    return true;
  };
  auto res = client.send(req);
  const bool over = plan.prompt_tokens > target.prompt_limit;
  counts->over_limit_sent += over;
  if (hung_up) {
    ++counts->disconnected;
    return;
  }
  if (!res) {
    ++counts->transport_error;
    return;
  }
  if (status == 400) {
    ++(over ? counts->over_limit_400 : counts->in_limit_400);
    ++counts->bad_request;
  } else if (status == 200) {
    ++counts->ok;
    if (plan.stream && (absl::StrContains(body, "data: {\"error\"") ||
                        !absl::EndsWith(body, "data: [DONE]\n\n")))
      ++counts->stream_error;
    const int tokens = PromptTokens(body, plan.stream);
    if (tokens > target.prompt_limit) ++counts->served_over_limit;
    if (tokens != plan.prompt_tokens) ++counts->token_estimate_off;
  } else if (status == 429) {
    ++counts->too_many;
  } else if (status >= 500) {
    ++counts->server_error;
  } else {
    ++counts->other_status;
  }
}

struct Check {
  std::string name;
  bool pass;
  std::string detail;
};

// The memory rule: end <= max(1.25 x base, base + 32 MiB).
Check MemoryCheck(const char* role, long base_kib, long end_kib) {
  const long allowed = std::max(base_kib + base_kib / 4, base_kib + kSlackKib);
  return {absl::StrCat("memory flat: ", role),
          base_kib > 0 && end_kib > 0 && end_kib <= allowed,
          absl::StrFormat("end %.1f MiB <= max(1.25 x %.1f, %.1f + 32) = %.1f "
                          "MiB",
                          end_kib / 1024.0, base_kib / 1024.0,
                          base_kib / 1024.0, allowed / 1024.0)};
}

std::vector<Check> Checks(const Counts& c, const std::vector<Sample>& samples,
                          const Sample& base, long restarts) {
  const Sample& end = samples.back();
  long violations = 0;  // the most any sample saw: a restart resets counters
  for (const Sample& s : samples)
    violations = s.violations < 0 || violations < 0
                     ? -1
                     : std::max(violations, s.violations);
  std::vector<Check> checks = {
      {"watermark violations == 0", violations == 0,
       violations < 0 ? "a node's /metrics unread"
                      : absl::StrCat(violations, " on the nodes")},
      {"used KV pages == 0 at the end",
       end.used_pages[0] == 0 && end.used_pages[1] == 0,
       absl::StrCat("prefill ", end.used_pages[0], ", decode ",
                    end.used_pages[1])},
      {"no 5xx", c.server_error == 0 && c.stream_error == 0,
       absl::StrCat(c.server_error.load(), " 5xx, ", c.stream_error.load(),
                    " 200 streams with an error event or no [DONE]")},
      {"over-limit prompts got 400, no other did",
       c.over_limit_400 == c.over_limit_sent && c.in_limit_400 == 0 &&
           c.served_over_limit == 0,
       absl::StrCat(c.over_limit_400.load(), " of ", c.over_limit_sent.load(),
                    " refused; ", c.in_limit_400.load(),
                    " in-limit prompts refused; ", c.served_over_limit.load(),
                    " served over the limit")},
      {"no transport errors, no restarts",
       c.transport_error == 0 && restarts == 0,
       absl::StrCat(c.transport_error.load(), " transport errors, ", restarts,
                    " restarts")},
  };
  const char* roles[3] = {"router", "prefill", "decode"};
  for (int r = 0; r < 3; ++r)
    checks.push_back(MemoryCheck(roles[r], base.rss_kib[r], end.rss_kib[r]));
  return checks;
}

nlohmann::json ToJson(const std::vector<Sample>& samples, const Counts& c,
                      const std::vector<Check>& checks, double load_s) {
  nlohmann::json j;
  for (const Sample& s : samples)
    j["samples"].push_back(
        {{"label", s.label},
         {"t_s", s.t_s},
         {"done", s.done},
         {"requests_per_s", s.requests_per_s},
         {"rss_kib", s.rss_kib},
         {"used_pages",
          {{"prefill", s.used_pages[0]}, {"decode", s.used_pages[1]}}},
         {"violations", s.violations}});
  j["outcomes"] = {{"ok", c.ok.load()},
                   {"bad_request", c.bad_request.load()},
                   {"too_many_requests", c.too_many.load()},
                   {"server_error", c.server_error.load()},
                   {"other_status", c.other_status.load()},
                   {"disconnected", c.disconnected.load()},
                   {"transport_error", c.transport_error.load()},
                   {"stream_error", c.stream_error.load()},
                   {"over_limit_sent", c.over_limit_sent.load()},
                   {"over_limit_400", c.over_limit_400.load()},
                   {"in_limit_400", c.in_limit_400.load()},
                   {"served_over_limit", c.served_over_limit.load()},
                   {"token_estimate_off", c.token_estimate_off.load()}};
  j["load_s"] = load_s;
  for (const Check& k : checks)
    j["checks"].push_back(
        {{"name", k.name}, {"pass", k.pass}, {"detail", k.detail}});
  return j;
}

void PrintSummary(const Counts& c, double load_s, long cancelled,
                  const std::vector<Check>& checks) {
  std::printf(
      "\n%ld requests in %.1f s (%.1f req/s): 200 %ld, 400 %ld, 429 %ld, "
      "5xx %ld, other %ld, disconnected %ld, transport errors %ld\n",
      c.done.load(), load_s, c.done / load_s, c.ok.load(), c.bad_request.load(),
      c.too_many.load(), c.server_error.load(), c.other_status.load(),
      c.disconnected.load(), c.transport_error.load());
  std::printf(
      "router counted %ld cancelled; %ld answers' prompt_tokens "
      "differed from the planned count\n\n",
      cancelled, c.token_estimate_off.load());
  TextTable table({{""}, {""}, {""}});
  for (const Check& k : checks)
    table.AddRow({k.pass ? "PASS" : "FAIL", k.name, k.detail});
  std::printf("%s", table.ToString().c_str());
}

// Polls the nodes until neither has a used page, for at most the timeout.
void Drain() {
  const auto deadline =
      Clock::now() + std::chrono::seconds(absl::GetFlag(FLAGS_drain_timeout_s));
  while (Clock::now() < deadline) {
    if (MetricSum(FetchMetrics(absl::GetFlag(FLAGS_prefill)),
                  "kvcanary_node_kv_pages", "state=\"used\"") == 0 &&
        MetricSum(FetchMetrics(absl::GetFlag(FLAGS_decode)),
                  "kvcanary_node_kv_pages", "state=\"used\"") == 0)
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

SamplerOptions SamplerFlags() {
  SamplerOptions o;
  o.prefill_url = absl::GetFlag(FLAGS_prefill);
  o.decode_url = absl::GetFlag(FLAGS_decode);
  o.up_pid = absl::GetFlag(FLAGS_up_pid);
  o.router_pid = absl::GetFlag(FLAGS_router_pid);
  o.prefill_pid = absl::GetFlag(FLAGS_prefill_pid);
  o.decode_pid = absl::GetFlag(FLAGS_decode_pid);
  o.interval_s = absl::GetFlag(FLAGS_sample_interval_s);
  o.progress = stderr;
  return o;
}

int Soak() {
  const absl::StatusOr<std::vector<Tenant>> read =
      ReadTenants(absl::GetFlag(FLAGS_tenants));
  if (!read.ok()) {
    std::fprintf(stderr, "kvcanary-soak: %s\n",
                 std::string(read.status().message()).c_str());
    return 2;
  }
  const std::vector<Tenant>& tenants = *read;
  Target target;
  target.router = absl::GetFlag(FLAGS_target);
  if (!ReadTarget(tenants[0], &target)) {
    std::fprintf(stderr,
                 "kvcanary-soak: cannot GET /version and calibrate on %s\n",
                 target.router.c_str());
    return 2;
  }
  const long requests = absl::GetFlag(FLAGS_requests);
  const int clients = absl::GetFlag(FLAGS_clients);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  std::printf(
      "soak: %ld requests, %d clients, %zu tenants, %.0f %% "
      "disconnects, prompts up to %d tokens (router limit %d, context "
      "%d), %zu one-token words, seed %llu\n",
      requests, clients, tenants.size(),
      100 * absl::GetFlag(FLAGS_disconnect_fraction), target.draw_limit,
      target.prompt_limit, target.context, target.words.size(),
      static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  Counts counts;
  const auto t0 = Clock::now();
  Sampler sampler(SamplerFlags(), t0, &counts.done, requests);
  sampler.Add("start");
  std::atomic<bool> stop{false};
  std::thread sampling([&] { sampler.Loop(stop); });
  std::atomic<long> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&] {
      httplib::Client client(target.router);
      client.set_read_timeout(120, 0);
      for (long i; (i = next.fetch_add(1)) < requests; ++counts.done) {
        const Plan plan = MakePlan(target, tenants.size(), seed, i);
        Run(client, tenants[plan.tenant], plan, target, &counts);
      }
    });
  }
  for (auto& t : threads) t.join();
  const double load_s =
      std::chrono::duration<double>(Clock::now() - t0).count();
  stop = true;
  sampling.join();
  sampler.Add("load");
  Drain();
  sampler.Add("end");
  const std::string router = FetchMetrics(target.router);
  const long cancelled = MetricSum(router, "kvcanary_node_requests_total",
                                   "outcome=\"cancelled\"");
  const long restarts =
      MetricSum(router, "kvcanary_engine_restarts_total", "role=");
  const std::vector<Check> checks =
      Checks(counts, sampler.samples(), sampler.baseline(), restarts);
  PrintSamples(sampler.samples());
  PrintSummary(counts, load_s, cancelled, checks);
  std::printf(
      "memory rule: each process's RSS at the end (after the drain) "
      "<= max(1.25 x B, B + 32 MiB), B = its RSS in the 10%% row\n");
  if (!absl::GetFlag(FLAGS_json).empty()) {
    const absl::Status written = WriteFileAtomically(
        absl::GetFlag(FLAGS_json),
        ToJson(sampler.samples(), counts, checks, load_s).dump(1) + "\n", 0644);
    if (!written.ok())
      std::fprintf(stderr, "soak: %s\n", written.ToString().c_str());
  }
  bool pass = true;
  for (const Check& k : checks) pass = pass && k.pass;
  std::printf("\nsoak: %s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}

}  // namespace
}  // namespace kvcanary::bench

int main(int argc, char** argv) {
  kvcanary::bench::DashesToUnderscores(argc, argv);
  absl::ParseCommandLine(argc, argv);
  const bool pids = absl::GetFlag(FLAGS_up_pid) > 0 ||
                    (absl::GetFlag(FLAGS_router_pid) > 0 &&
                     absl::GetFlag(FLAGS_prefill_pid) > 0 &&
                     absl::GetFlag(FLAGS_decode_pid) > 0);
  if (absl::GetFlag(FLAGS_target).empty() ||
      absl::GetFlag(FLAGS_tenants).empty() ||
      absl::GetFlag(FLAGS_decode).empty() ||
      absl::GetFlag(FLAGS_prefill).empty() || !pids ||
      absl::GetFlag(FLAGS_requests) < 1 || absl::GetFlag(FLAGS_clients) < 1) {
    std::fprintf(stderr,
                 "usage: kvcanary-soak --target URL --tenants FILE --decode "
                 "URL --prefill URL (--up-pid P | --router-pid P --prefill-pid "
                 "P --decode-pid P) [--requests N --clients C ...]\n");
    return 2;
  }
  return kvcanary::bench::Soak();
}
