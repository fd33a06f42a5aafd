// The scripted fake targets behave as docs/targets.md says each real server
// does: limits where they are advertised, refusals and truncation, errors
// inside HTTP 200 streams, 401 shapes, usage in streams, prefill timing, a
// prefix cache shared by all keys or salted per key, and a server that dies.
#include "tests/auditor/fakes/fake_target.h"

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "auditor/target/http_client.h"
#include "canaries/marker.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor::testing {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr Flavor kAllFlavors[] = {Flavor::kVllm, Flavor::kSglang,
                                  Flavor::kLlamaCpp, Flavor::kTgi,
                                  Flavor::kOllama};

struct Got {
  bool ok = false;  // a complete HTTP response arrived
  int status = 0;
  std::string body;
  double first_byte_ms = -1;  // first body byte after the request was sent
};

Got Send(const FakeTarget& t, const std::string& method,
         const std::string& path, const std::string& body = "",
         const std::string& key = "") {
  httplib::Client cli("127.0.0.1", t.port());
  cli.set_read_timeout(5, 0);
  httplib::Request req;
  req.method = method;
  req.path = path;
  req.body = body;
  if (!body.empty()) req.set_header("Content-Type", "application/json");
  if (!key.empty()) req.set_header("Authorization", "Bearer " + key);
  Got g;
  const auto start = Clock::now();
  req.content_receiver = [&](const char* data, size_t size, uint64_t,
                             uint64_t) {
    if (g.first_byte_ms < 0) {
      g.first_byte_ms =
          std::chrono::duration<double, std::milli>(Clock::now() - start)
              .count();
    }
    g.body.append(data, size);
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  g.ok = cli.send(req, res, error);
  g.status = res.status;
  return g;
}

Got Complete(const FakeTarget& t, const json& request,
             const std::string& key = "", bool chat = false) {
  return Send(t, "POST", chat ? "/v1/chat/completions" : "/v1/completions",
              request.dump(), key);
}

// "w0 w1 ... w<n-1>": n tokens, n + 1 with BOS.
std::string Words(int n, const std::string& stem = "w") {
  std::vector<std::string> words;
  for (int i = 0; i < n; ++i) words.push_back(absl::StrCat(stem, i));
  return absl::StrJoin(words, " ");
}

// The events of an SSE body, one string per event ("data: ..." etc.).
std::vector<std::string> Events(const std::string& body) {
  std::vector<std::string> events;
  for (absl::string_view e : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    events.emplace_back(e);
  }
  return events;
}

json DataJson(const std::string& event) {
  EXPECT_TRUE(absl::StartsWith(event, "data: ")) << event;
  return json::parse(event.substr(6));
}

json Parse(const Got& g) { return json::parse(g.body); }

FakeTargetOptions Opts(Flavor f, int limit = 64) {
  FakeTargetOptions o;
  o.flavor = f;
  o.limit_tokens = limit;
  o.base_ms = 0;
  o.prefill_us_per_token = 0;
  return o;
}

TEST(FakeTokenCountTest, CountsBosWordsAndEveryOtherByte) {
  EXPECT_EQ(FakeTokenCount(""), 1);
  EXPECT_EQ(FakeTokenCount("  \n\t"), 1);
  EXPECT_EQ(FakeTokenCount("Hello, world!"), 5);  // BOS Hello , world !
  EXPECT_EQ(FakeTokenCount("a1b2 c3"), 3);
  EXPECT_EQ(FakeTokenCount("NONCE-7f3a."), 5);        // BOS NONCE - 7f3a .
  EXPECT_EQ(FakeTokenCount("\xc3\xa9t\xc3\xa9"), 6);  // "été": 4 bytes + t
  EXPECT_EQ(FakeTokenCount(Words(10)), 11);
}

TEST(FakeTargetTest, AdvertisesTheLimitOnlyWhereEachFlavorDoes) {
  for (Flavor f : kAllFlavors) {
    for (bool advertise : {true, false}) {
      SCOPED_TRACE(absl::StrCat(FlavorName(f), " advertise=", advertise));
      FakeTargetOptions o = Opts(f, 100);
      o.advertise_limit = advertise;
      FakeTarget t(o);
      const json models = Parse(Send(t, "GET", "/v1/models"));
      const json& card = models["data"][0];
      EXPECT_EQ(card["id"], "fake-model");
      switch (f) {
        case Flavor::kVllm:
          EXPECT_EQ(card.contains("max_model_len"), advertise);
          if (advertise) {
            EXPECT_EQ(card["max_model_len"], 101);
          }
          break;
        case Flavor::kSglang: {
          EXPECT_EQ(card.contains("max_model_len"), advertise);
          const json info = Parse(Send(t, "GET", "/get_server_info"));
          EXPECT_EQ(info["context_length"].is_null(), !advertise);
          EXPECT_EQ(info.contains("max_req_input_len"), advertise);
          if (advertise) {
            EXPECT_EQ(card["max_model_len"], 101);
            EXPECT_EQ(info["context_length"], 101);
            EXPECT_EQ(info["max_req_input_len"], 100);
          }
          const json model = Parse(Send(t, "GET", "/get_model_info"));
          EXPECT_FALSE(model.contains("context_length"));
          break;
        }
        case Flavor::kLlamaCpp: {
          const json props = Parse(Send(t, "GET", "/props"));
          const json& dgs = props["default_generation_settings"];
          EXPECT_EQ(dgs.contains("n_ctx"), advertise);
          if (advertise) {
            EXPECT_EQ(dgs["n_ctx"], 101);
          }
          // The training context, never the serving window.
          EXPECT_FALSE(card["meta"].contains("n_ctx"));
          EXPECT_GT(card["meta"]["n_ctx_train"].get<int>(), 101);
          break;
        }
        case Flavor::kTgi: {
          const json info = Parse(Send(t, "GET", "/info"));
          EXPECT_EQ(info.contains("max_input_tokens"), advertise);
          if (advertise) {
            EXPECT_EQ(info["max_input_tokens"], 100);
            EXPECT_EQ(info["max_total_tokens"], 101);
          }
          EXPECT_FALSE(card.contains("max_model_len"));
          break;
        }
        case Flavor::kOllama: {
          const json show =
              Parse(Send(t, "POST", "/api/show", R"({"model":"fake-model"})"));
          EXPECT_EQ(absl::StrContains(show["parameters"].get<std::string>(),
                                      "num_ctx 100"),
                    advertise);
          EXPECT_GT(show["model_info"]["fake.context_length"].get<int>(), 100);
          EXPECT_FALSE(card.contains("max_model_len"));
          break;
        }
      }
    }
  }
}

TEST(FakeTargetTest, ProcessesThePromptAtTheLimitAndRefusesOneMore) {
  for (Flavor f : kAllFlavors) {
    SCOPED_TRACE(FlavorName(f));
    FakeTarget t(Opts(f, 32));
    const Got at = Complete(t, {{"prompt", Words(31)}, {"max_tokens", 4}});
    ASSERT_EQ(at.status, 200) << at.body;
    EXPECT_EQ(Parse(at)["usage"]["prompt_tokens"], 32);
    EXPECT_EQ(Parse(at)["usage"]["completion_tokens"], 4);

    const Got over = Complete(t, {{"prompt", Words(32)}, {"max_tokens", 4}});
    const json e = Parse(over);
    switch (f) {
      case Flavor::kVllm:
        EXPECT_EQ(over.status, 400);
        EXPECT_EQ(e["error"]["code"], 400);
        EXPECT_EQ(e["error"]["type"], "BadRequestError");
        EXPECT_TRUE(e["error"]["param"].is_null());
        EXPECT_TRUE(absl::StrContains(e["error"]["message"].get<std::string>(),
                                      "maximum model length of 33"));
        break;
      case Flavor::kSglang:  // flat, not under "error"
        EXPECT_EQ(over.status, 400);
        EXPECT_EQ(e["object"], "error");
        EXPECT_EQ(e["code"], 400);
        EXPECT_FALSE(e.contains("error"));
        EXPECT_TRUE(absl::StrContains(e["message"].get<std::string>(),
                                      "The input (33 tokens)"));
        break;
      case Flavor::kLlamaCpp:
        EXPECT_EQ(over.status, 400);
        EXPECT_EQ(e["error"]["type"], "exceed_context_size_error");
        EXPECT_EQ(e["error"]["n_prompt_tokens"], 33);
        EXPECT_EQ(e["error"]["n_ctx"], 33);
        break;
      case Flavor::kTgi:
        EXPECT_EQ(over.status, 422);
        EXPECT_TRUE(e["error"].is_string());
        EXPECT_EQ(e["error_type"], "validation");
        break;
      case Flavor::kOllama:
        EXPECT_EQ(over.status, 400);
        EXPECT_EQ(e["error"]["type"], "invalid_request_error");
        EXPECT_TRUE(e["error"]["code"].is_null());
        break;
    }
  }
}

TEST(FakeTargetTest, StreamedRefusalIsAPlainErrorExceptOnTgi) {
  const json request = {{"prompt", Words(40)}, {"stream", true}};
  {
    FakeTarget t(Opts(Flavor::kVllm, 32));
    const Got g = Complete(t, request);
    EXPECT_EQ(g.status, 400);
    EXPECT_EQ(Parse(g)["error"]["code"], 400);
  }
  {
    FakeTarget t(Opts(Flavor::kTgi, 32));
    const Got g = Complete(t, request);
    EXPECT_EQ(g.status, 200);  // TGI validates inside the stream
    const std::vector<std::string> ev = Events(g.body);
    ASSERT_EQ(ev.size(), 2u) << g.body;
    EXPECT_EQ(DataJson(ev[0])["error_type"], "validation");
    EXPECT_EQ(ev[1], "data: [DONE]");
  }
}

TEST(FakeTargetTest, ErrorInStreamIsHttp200ThenAnErrorEventThenDone) {
  const json over = {{"prompt", Words(40)}, {"stream", true}};
  for (Flavor f : kAllFlavors) {
    SCOPED_TRACE(FlavorName(f));
    FakeTargetOptions o = Opts(f, 32);
    o.over_limit = OverLimit::kErrorInStream;
    FakeTarget t(o);

    const Got plain = Complete(t, {{"prompt", Words(40)}});
    EXPECT_GE(plain.status, 400);
    EXPECT_LT(plain.status, 500);

    const Got g = Complete(t, over);
    ASSERT_EQ(g.status, 200);
    const std::vector<std::string> ev = Events(g.body);
    ASSERT_EQ(ev.size(), 2u) << g.body;
    EXPECT_EQ(ev[1], "data: [DONE]");
    switch (f) {
      case Flavor::kVllm:
        EXPECT_EQ(DataJson(ev[0])["error"]["code"], 400);
        break;
      case Flavor::kSglang:
        EXPECT_EQ(DataJson(ev[0])["error"]["object"], "error");
        break;
      case Flavor::kLlamaCpp: {  // an `error:` field, not `data:`
        ASSERT_TRUE(absl::StartsWith(ev[0], "error: ")) << ev[0];
        const json e = json::parse(ev[0].substr(7));
        EXPECT_EQ(e["code"], 400);
        EXPECT_EQ(e["type"], "invalid_request_error");
        break;
      }
      case Flavor::kTgi:
        EXPECT_EQ(DataJson(ev[0])["error_type"], "validation");
        break;
      case Flavor::kOllama:
        EXPECT_EQ(DataJson(ev[0])["error"]["type"], "invalid_request_error");
        break;
    }
  }
}

TEST(FakeTargetTest, TgiChatStreamDropsTheErrorAndSendsOnlyDone) {
  FakeTarget t(Opts(Flavor::kTgi, 32));
  const json request = {
      {"messages", {{{"role", "user"}, {"content", Words(40)}}}},
      {"stream", true}};
  const Got g = Complete(t, request, "", /*chat=*/true);
  EXPECT_EQ(g.status, 200);
  EXPECT_EQ(g.body, "data: [DONE]\n\n");
}

TEST(FakeTargetTest, KeepTailReportsTheLimitAndAnswersFromTheTail) {
  FakeTargetOptions o = Opts(Flavor::kVllm, 32);
  o.over_limit = OverLimit::kKeepTail;
  FakeTarget t(o);
  const Got g = Complete(t, {{"prompt", Words(100)}, {"max_tokens", 3}});
  ASSERT_EQ(g.status, 200) << g.body;
  const json j = Parse(g);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 32);
  EXPECT_EQ(j["choices"][0]["text"], " w97 w98 w99");

  const Got s = Complete(t, {{"prompt", Words(100)},
                             {"stream", true},
                             {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(s.status, 200);
  const std::vector<std::string> ev = Events(s.body);
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(DataJson(ev[ev.size() - 2])["usage"]["prompt_tokens"], 32);
}

TEST(FakeTargetTest, KeepHeadKeepsTheStartOfThePrompt) {
  FakeTargetOptions o = Opts(Flavor::kSglang, 32);
  o.over_limit = OverLimit::kKeepHead;
  FakeTarget t(o);
  const json j =
      Parse(Complete(t, {{"prompt", Words(100)}, {"max_tokens", 2}}));
  EXPECT_EQ(j["usage"]["prompt_tokens"], 32);
  EXPECT_EQ(j["choices"][0]["text"], " w29 w30");  // BOS + w0..w30
}

// llama.cpp's context shift (n_ctx = 33, n_keep = 4): the first 4 tokens
// (BOS, w0..w2) and the tail past whole dropped blocks of 14. What it
// reports varies with the prompt's length.
TEST(FakeTargetTest, KeepHeadAndTailDropsWholeBlocksAfterTheHead) {
  FakeTargetOptions o = Opts(Flavor::kLlamaCpp, 32);
  o.over_limit = OverLimit::kKeepHeadAndTail;
  FakeTarget t(o);
  for (const auto& [words, kept] : std::vector<std::pair<int, int>>{
           {31, 32}, {32, 19}, {45, 18}, {60, 19}}) {
    SCOPED_TRACE(words);
    const json j =
        Parse(Complete(t, {{"prompt", Words(words)}, {"max_tokens", 2}}));
    EXPECT_EQ(j["usage"]["prompt_tokens"], kept);
    EXPECT_EQ(j["choices"][0]["text"],
              absl::StrCat(" w", words - 2, " w", words - 1));
  }
  EXPECT_EQ(t.truncated(), 3);
}

// A window that shrinks while another request is being handled.
TEST(FakeTargetTest, BusyLimitAppliesOnlyWithAnotherRequestInFlight) {
  FakeTargetOptions o = Opts(Flavor::kVllm, 64);
  o.busy_limit_tokens = 16;
  // 61 tokens: 0.6 s of prefill, so the second request arrives during it.
  o.prefill_us_per_token = 10000;
  FakeTarget t(o);
  const json alone =
      Parse(Complete(t, {{"prompt", Words(40)}, {"max_tokens", 1}}));
  EXPECT_EQ(alone["usage"]["prompt_tokens"], 41);
  Got first;
  std::thread slow([&] {
    first = Complete(t, {{"prompt", Words(60)}, {"max_tokens", 1}});
  });
  // Wait until the slow request is being handled, then send another.
  while (t.completions() < 2)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const Got busy = Complete(t, {{"prompt", Words(40)}, {"max_tokens", 1}});
  slow.join();
  EXPECT_EQ(busy.status, 400) << busy.body;  // past 16 tokens: refused
  EXPECT_EQ(first.status, 200) << first.body;
}

TEST(FakeTargetTest, AnswersAreDeterministicAndEchoTheNonce) {
  FakeTarget t(Opts(Flavor::kLlamaCpp, 256));
  const json echo = {
      {"prompt", "Repeat the code twice. Code: NONCE-7f3a. Code: NONCE-7f3a."},
      {"max_tokens", 10},
      {"temperature", 1.5}};
  const json a = Parse(Complete(t, echo));
  EXPECT_EQ(a["choices"][0]["text"], " NONCE-7f3a. Code: NONCE-7f3a.");
  EXPECT_EQ(a["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(Parse(Complete(t, echo))["choices"][0]["text"],
            a["choices"][0]["text"]);
  // A short prompt ends early; chat messages are joined with "\n".
  const json chat = {{"messages",
                      {{{"role", "system"}, {"content", "Be brief."}},
                       {{"role", "user"}, {"content", "Say ok"}}}},
                     {"max_tokens", 10}};
  const json c = Parse(Complete(t, chat, "", /*chat=*/true));
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_EQ(c["choices"][0]["message"]["content"], " Be brief.\nSay ok");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(c["usage"]["prompt_tokens"], FakeTokenCount("Be brief.\nSay ok"));

  FakeTargetOptions filler = Opts(Flavor::kVllm);
  filler.echo = false;
  FakeTarget f(filler);
  json short_echo = echo;
  short_echo["max_tokens"] = 8;
  EXPECT_EQ(Parse(Complete(f, short_echo))["choices"][0]["text"],
            " the quick brown one jumps over lazy days");
  // No filler word is a marker word: filler never passes an echo check.
  for (absl::string_view w : absl::StrSplit(
           std::string(Parse(Complete(f, short_echo))["choices"][0]["text"]),
           ' ', absl::SkipEmpty())) {
    EXPECT_EQ(canaries::MarkerWordIndex(w), -1) << w;
  }
}

TEST(FakeTargetTest, UsageInStreamsFollowsTheFlavor) {
  const json plain = {{"prompt", "a b c"}, {"max_tokens", 2}, {"stream", true}};
  json with_usage = plain;
  with_usage["stream_options"] = {{"include_usage", true}};
  json empty_options = plain;
  empty_options["stream_options"] = json::object();
  auto has_usage = [](const std::vector<std::string>& ev) {
    for (const std::string& e : ev) {
      if (absl::StrContains(e, "\"usage\"")) return true;
    }
    return false;
  };
  {  // vLLM: only on request, in a last chunk with no choices
    FakeTarget t(Opts(Flavor::kVllm));
    EXPECT_FALSE(has_usage(Events(Complete(t, plain).body)));
    const std::vector<std::string> ev = Events(Complete(t, with_usage).body);
    ASSERT_EQ(ev.size(), 4u);  // 2 tokens, usage, [DONE]
    const json u = DataJson(ev[2]);
    EXPECT_TRUE(u["choices"].empty());
    EXPECT_EQ(u["usage"]["prompt_tokens"], 4);
    EXPECT_TRUE(has_usage(Events(Complete(t, empty_options).body)));
  }
  {  // SGLang: stream_options without include_usage means no usage
    FakeTarget t(Opts(Flavor::kSglang));
    EXPECT_FALSE(has_usage(Events(Complete(t, empty_options).body)));
    EXPECT_TRUE(has_usage(Events(Complete(t, with_usage).body)));
  }
  {  // llama.cpp: timings on the last chunk even without usage
    FakeTarget t(Opts(Flavor::kLlamaCpp));
    const std::vector<std::string> ev = Events(Complete(t, plain).body);
    ASSERT_EQ(ev.size(), 3u);
    EXPECT_FALSE(has_usage(ev));
    EXPECT_EQ(DataJson(ev[1])["timings"]["prompt_n"], 4);
  }
  {  // TGI: completions always, in the finishing chunk; chat only on request
    FakeTarget t(Opts(Flavor::kTgi));
    const std::vector<std::string> ev = Events(Complete(t, plain).body);
    ASSERT_EQ(ev.size(), 3u);
    const json last = DataJson(ev[1]);
    EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(last["usage"]["prompt_tokens"], 4);
    json chat = plain;
    chat.erase("prompt");
    chat["messages"] = {{{"role", "user"}, {"content", "a b c"}}};
    EXPECT_FALSE(has_usage(Events(Complete(t, chat, "", true).body)));
    chat["stream_options"] = {{"include_usage", true}};
    const std::vector<std::string> cev =
        Events(Complete(t, chat, "", true).body);
    ASSERT_EQ(cev.size(), 3u);
    EXPECT_EQ(DataJson(cev[1])["usage"]["prompt_tokens"], 4);
  }
  {  // Ollama completions: zero usage on every chunk, the real one last
    FakeTarget t(Opts(Flavor::kOllama));
    const std::vector<std::string> ev = Events(Complete(t, with_usage).body);
    ASSERT_EQ(ev.size(), 4u);
    EXPECT_EQ(DataJson(ev[0])["usage"]["prompt_tokens"], 0);
    EXPECT_EQ(DataJson(ev[2])["usage"]["prompt_tokens"], 4);
  }
}

TEST(FakeTargetTest, UnauthorizedAnswersInEachFlavorsShape) {
  const json request = {{"prompt", "hi"}, {"max_tokens", 1}};
  for (Flavor f : kAllFlavors) {
    SCOPED_TRACE(FlavorName(f));
    FakeTargetOptions o = Opts(f);
    o.api_keys = {{"sk-a", "tenant-a"}, {"sk-b", "tenant-b"}};
    FakeTarget t(o);
    EXPECT_EQ(Complete(t, request, "sk-b").status, 200);
    for (const std::string& key : {std::string(""), std::string("sk-wrong")}) {
      const Got g = Complete(t, request, key);
      EXPECT_EQ(g.status, 401);
      switch (f) {
        case Flavor::kVllm:
        case Flavor::kSglang:
          EXPECT_EQ(Parse(g)["error"], "Unauthorized");
          break;
        case Flavor::kLlamaCpp:
          EXPECT_EQ(Parse(g)["error"]["type"], "authentication_error");
          EXPECT_EQ(Parse(g)["error"]["code"], 401);
          break;
        case Flavor::kTgi:
          EXPECT_EQ(g.body, "");
          break;
        case Flavor::kOllama:
          EXPECT_EQ(Parse(g)["error"]["type"], "api_error");
          break;
      }
    }
    EXPECT_EQ(Send(t, "GET", "/v1/models").status, 200);
  }
  FakeTargetOptions guarded = Opts(Flavor::kVllm);
  guarded.api_keys = {{"sk-a", "tenant-a"}};
  guarded.models_needs_key = true;
  FakeTarget v(guarded);
  EXPECT_EQ(Send(v, "GET", "/v1/models").status, 401);
  EXPECT_EQ(Send(v, "GET", "/v1/models", "", "sk-a").status, 200);
  EXPECT_EQ(Send(v, "GET", "/health").status, 200);
  EXPECT_EQ(Send(v, "GET", "/metrics").status, 200);

  // Info endpoints follow the real servers, whatever models_needs_key says.
  FakeTargetOptions s = Opts(Flavor::kSglang);
  s.api_keys = {{"sk-a", "tenant-a"}};
  FakeTarget sg(s);
  EXPECT_EQ(Send(sg, "GET", "/get_server_info").status, 401);
  EXPECT_EQ(Send(sg, "GET", "/get_server_info", "", "sk-a").status, 200);
  FakeTargetOptions l = Opts(Flavor::kLlamaCpp);
  l.api_keys = {{"sk-a", "tenant-a"}};
  FakeTarget ll(l);
  EXPECT_EQ(Send(ll, "GET", "/props").status, 401);
  EXPECT_EQ(Send(ll, "GET", "/health").status, 200);
  FakeTargetOptions g = Opts(Flavor::kTgi);
  g.api_keys = {{"sk-a", "tenant-a"}};
  FakeTarget tg(g);
  EXPECT_EQ(Send(tg, "GET", "/info").status, 200);
}

TEST(FakeTargetTest, TimeToFirstTokenGrowsWithUncachedPromptTokens) {
  FakeTargetOptions o = Opts(Flavor::kVllm, 1024);
  o.base_ms = 1;
  o.prefill_us_per_token = 500;
  FakeTarget t(o);
  const json small = {{"prompt", Words(19)}, {"stream", true}};
  const json large = {{"prompt", Words(399)}, {"stream", true}};
  const Got a = Complete(t, small);  // 20 tokens: ~11 ms
  const Got b = Complete(t, large);  // 400 tokens: ~201 ms
  ASSERT_EQ(a.status, 200);
  ASSERT_EQ(b.status, 200);
  EXPECT_GE(b.first_byte_ms, 200);
  EXPECT_GT(b.first_byte_ms, a.first_byte_ms + 100);
  // Without a shared cache a repeat is just as slow.
  EXPECT_GE(Complete(t, large).first_byte_ms, 200);
  EXPECT_EQ(t.cached_tokens_served(), 0);
}

TEST(FakeTargetTest, SharedCacheServesARepeatFromAnotherKeyFast) {
  FakeTargetOptions o = Opts(Flavor::kVllm, 1024);
  o.prefill_us_per_token = 1000;
  o.shared_prompt_cache = true;
  o.report_cached_tokens = true;
  o.api_keys = {{"sk-a", "tenant-a"}, {"sk-b", "tenant-b"}};
  FakeTarget t(o);
  const json request = {{"prompt", Words(255)}, {"max_tokens", 1}};  // 256
  const Got first = Complete(t, request, "sk-a");
  const Got second = Complete(t, request, "sk-b");
  ASSERT_EQ(first.status, 200);
  ASSERT_EQ(second.status, 200);
  EXPECT_GE(first.first_byte_ms, 256);
  EXPECT_LT(second.first_byte_ms, first.first_byte_ms / 3);
  EXPECT_EQ(Parse(first)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  // All 16 blocks were seen; the last is recomputed.
  EXPECT_EQ(Parse(second)["usage"]["prompt_tokens_details"]["cached_tokens"],
            240);
  EXPECT_EQ(Parse(second)["usage"]["prompt_tokens"], 256);
  EXPECT_EQ(t.cached_tokens_served(), 240);

  // A shared prefix counts only its full blocks.
  const json other = {{"prompt", Words(40) + " different tail"},
                      {"max_tokens", 1}};
  EXPECT_EQ(
      Parse(Complete(
          t, other, "sk-a"))["usage"]["prompt_tokens_details"]["cached_tokens"],
      32);
}

TEST(FakeTargetTest, PerKeyCacheServesOnlyTheSameKeysRepeatFast) {
  FakeTargetOptions o = Opts(Flavor::kVllm, 1024);
  o.prefill_us_per_token = 1000;
  o.per_key_prompt_cache = true;
  o.report_cached_tokens = true;
  o.api_keys = {{"sk-a", "tenant-a"}, {"sk-b", "tenant-b"}};
  FakeTarget t(o);
  const json request = {{"prompt", Words(255)}, {"max_tokens", 1}};  // 256
  const Got first = Complete(t, request, "sk-a");
  const Got other = Complete(t, request, "sk-b");  // another key: a miss
  const Got again = Complete(t, request, "sk-a");  // the same key: a hit
  ASSERT_EQ(first.status, 200);
  ASSERT_EQ(other.status, 200);
  ASSERT_EQ(again.status, 200);
  EXPECT_GE(other.first_byte_ms, 256);
  EXPECT_LT(again.first_byte_ms, first.first_byte_ms / 3);
  auto cached = [](const Got& g) {
    return Parse(g)["usage"]["prompt_tokens_details"]["cached_tokens"];
  };
  EXPECT_EQ(cached(first), 0);
  EXPECT_EQ(cached(other), 0);
  EXPECT_EQ(cached(again), 240);
  // sk-b's own repeat hits its own entry.
  EXPECT_EQ(cached(Complete(t, request, "sk-b")), 240);
  EXPECT_EQ(t.cached_tokens_served(), 480);
}

TEST(FakeTargetTest, CacheHitsAreReportedOnlyWhereTheFlavorReportsThem) {
  const json request = {{"prompt", Words(63)}, {"max_tokens", 1}};
  for (Flavor f : kAllFlavors) {
    SCOPED_TRACE(FlavorName(f));
    FakeTargetOptions o = Opts(f, 128);
    o.shared_prompt_cache = true;
    FakeTarget t(o);
    Complete(t, request);
    const json j = Parse(Complete(t, request));
    EXPECT_EQ(t.cached_tokens_served(), 48);
    const bool reported = j["usage"].contains("prompt_tokens_details");
    EXPECT_EQ(reported, f == Flavor::kLlamaCpp);  // report flag off
    if (f == Flavor::kLlamaCpp) {
      EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 48);
      EXPECT_EQ(j["timings"]["cache_n"], 48);
      EXPECT_EQ(j["timings"]["prompt_n"], 16);
    }
  }
  // llama.cpp builds before usage_json_oaicompat: timings only.
  FakeTargetOptions o = Opts(Flavor::kLlamaCpp, 128);
  o.shared_prompt_cache = true;
  o.llama_prompt_tokens_details = false;
  FakeTarget t(o);
  Complete(t, request);
  const json j = Parse(Complete(t, request));
  EXPECT_FALSE(j["usage"].contains("prompt_tokens_details"));
  EXPECT_EQ(j["usage"]["prompt_tokens"], 64);
  EXPECT_EQ(j["timings"]["prompt_n"], 16);
}

TEST(FakeTargetTest, StopsListeningAfterDieAfterCompletions) {
  FakeTargetOptions o = Opts(Flavor::kSglang);
  o.die_after_completions = 2;
  FakeTarget t(o);
  const std::string body = R"({"prompt":"hi","max_tokens":1})";
  HttpClient client;
  const std::vector<std::string> headers = {"Content-Type: application/json"};
  for (int i = 0; i < 2; ++i) {
    auto r = client.Post(t.url() + "/v1/completions", body, headers,
                         absl::Seconds(5));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200);
  }
  auto dead =
      client.Post(t.url() + "/v1/completions", body, headers, absl::Seconds(5));
  ASSERT_FALSE(dead.ok());
  EXPECT_EQ(dead.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(client.Get(t.url() + "/health", {}, absl::Seconds(5)).ok());
  EXPECT_EQ(t.completions(), 2);
}

// Prompts it processes whole do not count; the second cut one is still
// answered, then the port is closed.
TEST(FakeTargetTest, StopsListeningAfterDieAfterTruncations) {
  FakeTargetOptions o = Opts(Flavor::kVllm, 32);
  o.over_limit = OverLimit::kKeepTail;
  o.die_after_truncations = 2;
  FakeTarget t(o);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Complete(t, {{"prompt", Words(8)}, {"max_tokens", 1}}).status,
              200);
  }
  for (int i = 0; i < 2; ++i) {
    const Got cut = Complete(t, {{"prompt", Words(100)}, {"max_tokens", 1}});
    ASSERT_EQ(cut.status, 200) << cut.body;
    EXPECT_EQ(Parse(cut)["usage"]["prompt_tokens"], 32);
  }
  HttpClient client;
  EXPECT_FALSE(client.Get(t.url() + "/health", {}, absl::Seconds(5)).ok());
  EXPECT_EQ(t.completions(), 5);
}

TEST(FakeTargetTest, LlamaSlotsShowPromptsOnlyWhenAsked) {
  for (bool expose : {false, true}) {
    FakeTargetOptions o = Opts(Flavor::kLlamaCpp);
    o.slots_expose_prompts = expose;
    FakeTarget t(o);
    Complete(t, {{"prompt", "secret of tenant a"}, {"max_tokens", 1}});
    const json slots = Parse(Send(t, "GET", "/slots"));
    EXPECT_EQ(slots[0]["n_prompt_tokens"], 5);
    EXPECT_EQ(slots[0].contains("prompt"), expose);
    if (expose) {
      EXPECT_EQ(slots[0]["prompt"], "secret of tenant a");
    }
  }
}

TEST(FakeTargetTest, HealthEndpointsAreTheFlavorsOwn) {
  FakeTarget v(Opts(Flavor::kVllm));
  EXPECT_EQ(Send(v, "GET", "/health").status, 200);
  FakeTarget l(Opts(Flavor::kLlamaCpp));
  EXPECT_EQ(Parse(Send(l, "GET", "/health"))["status"], "ok");
  FakeTarget ol(Opts(Flavor::kOllama));
  EXPECT_EQ(Send(ol, "GET", "/health").status, 404);
  const Got root = Send(ol, "GET", "/");
  EXPECT_EQ(root.status, 200);
  EXPECT_EQ(root.body, "Ollama is running");
}

TEST(FakeTargetTest, MalformedRequestsGetTheFlavorsBadRequest) {
  FakeTarget v(Opts(Flavor::kVllm));
  EXPECT_EQ(Send(v, "POST", "/v1/completions", "{not json").status, 400);
  EXPECT_EQ(Complete(v, {{"max_tokens", 2}}).status, 400);
  EXPECT_EQ(Complete(v, {{"prompt", "x"}, {"max_tokens", 0}}).status, 400);
  FakeTarget t(Opts(Flavor::kTgi));
  const Got g = Send(t, "POST", "/v1/completions", "{not json");
  EXPECT_EQ(g.status, 422);
  EXPECT_EQ(Parse(g)["error_type"], "validation");
}

}  // namespace
}  // namespace kvcanary::auditor::testing
