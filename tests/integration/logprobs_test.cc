// Log-probabilities through the router as a client reads them
// (docs/api.md, "Log-probabilities"): completions' {tokens,
// token_logprobs, top_logprobs, text_offset} with and without `echo`,
// chat's {content, refusal}, streamed chunks adding up to the whole answer,
// and a request's figures bitwise the same alone and among 32 others.
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

nlohmann::json Body(const std::string& prompt, int max_tokens) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

nlohmann::json ChatBody(const std::string& content, int max_tokens) {
  return {{"messages", {{{"role", "user"}, {"content", content}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0}};
}

class LogprobsApiTest : public SharedClusterTest {
 protected:
  static HttpResult Send(const nlohmann::json& body, bool chat = false) {
    return Post(cluster_->router(),
                chat ? "/v1/chat/completions" : "/v1/completions", body.dump(),
                "sk-acme");
  }
};

// The JSON events of an SSE body, [DONE] excluded.
std::vector<nlohmann::json> Events(const std::string& body) {
  std::vector<nlohmann::json> events;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!absl::ConsumePrefix(&line, "data: ") || line == "[DONE]") continue;
    events.push_back(nlohmann::json::parse(line));
  }
  return events;
}

TEST_F(LogprobsApiTest, CompletionsDescribeEveryGeneratedToken) {
  nlohmann::json body = Body("Once upon a time", 8);
  body["logprobs"] = 3;
  HttpResult r = Send(body);
  ASSERT_EQ(r.status, 200) << r.body;
  const nlohmann::json& choice = r.json["choices"][0];
  const nlohmann::json& lp = choice["logprobs"];
  const size_t n = r.json["usage"]["completion_tokens"].get<size_t>();
  ASSERT_EQ(lp["tokens"].size(), n) << r.body;
  ASSERT_EQ(lp["token_logprobs"].size(), n);
  ASSERT_EQ(lp["top_logprobs"].size(), n);
  std::string text;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(lp["text_offset"][i].get<size_t>(), text.size());
    const std::string token = lp["tokens"][i];
    text += token;
    const double logprob = lp["token_logprobs"][i];
    EXPECT_LE(logprob, 0.0);
    const nlohmann::json& top = lp["top_logprobs"][i];
    EXPECT_LE(top.size(), 4u);  // 3, and the token itself
    // Greedy: the token is the most likely one.
    EXPECT_EQ(top[token].get<double>(), logprob);
    for (const auto& [alt, alt_lp] : top.items()) {
      EXPECT_LE(alt_lp.get<double>(), logprob) << alt;
    }
  }
  EXPECT_EQ(text, choice["text"]);
  // Not asked for: null, as before.
  HttpResult plain = Send(Body("Once upon a time", 8));
  EXPECT_TRUE(plain.json["choices"][0]["logprobs"].is_null()) << plain.body;
  EXPECT_EQ(plain.json["choices"][0]["text"], choice["text"]);
}

TEST_F(LogprobsApiTest, EchoReturnsThePromptAndItsTokensLogprobs) {
  const std::string prompt = "Once upon a time there was";
  nlohmann::json body = Body(prompt, 4);
  body["logprobs"] = 2;
  body["echo"] = true;
  HttpResult r = Send(body);
  ASSERT_EQ(r.status, 200) << r.body;
  const nlohmann::json& choice = r.json["choices"][0];
  const std::string text = choice["text"];
  EXPECT_TRUE(absl::StartsWith(text, prompt)) << text;
  const nlohmann::json& lp = choice["logprobs"];
  const size_t prompt_tokens = r.json["usage"]["prompt_tokens"].get<size_t>();
  const size_t completion = r.json["usage"]["completion_tokens"].get<size_t>();
  // Every prompt token after BOS, each with its logprob, then the output.
  ASSERT_EQ(lp["tokens"].size(), prompt_tokens - 1 + completion) << r.body;
  std::string joined;
  for (size_t i = 0; i < lp["tokens"].size(); ++i) {
    EXPECT_TRUE(lp["token_logprobs"][i].is_number()) << i;
    joined += lp["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(joined, text);
  // The generated part is what the same request without echo returns.
  nlohmann::json no_echo = body;
  no_echo.erase("echo");
  HttpResult plain = Send(no_echo);
  const nlohmann::json& plain_lp = plain.json["choices"][0]["logprobs"];
  for (size_t i = 0; i < completion; ++i) {
    EXPECT_EQ(lp["token_logprobs"][prompt_tokens - 1 + i],
              plain_lp["token_logprobs"][i]);
  }
  // echo without logprobs: the text only.
  nlohmann::json echo_only = Body(prompt, 4);
  echo_only["echo"] = true;
  HttpResult e = Send(echo_only);
  EXPECT_EQ(e.json["choices"][0]["text"], text) << e.body;
  EXPECT_TRUE(e.json["choices"][0]["logprobs"].is_null());
}

TEST_F(LogprobsApiTest, ChatCarriesTopLogprobsAndBytes) {
  nlohmann::json body = ChatBody("Once upon a time", 6);
  body["logprobs"] = true;
  body["top_logprobs"] = 4;
  HttpResult r = Send(body, /*chat=*/true);
  ASSERT_EQ(r.status, 200) << r.body;
  const nlohmann::json& lp = r.json["choices"][0]["logprobs"];
  EXPECT_TRUE(lp["refusal"].is_null());
  const nlohmann::json& content = lp["content"];
  ASSERT_EQ(content.size(), r.json["usage"]["completion_tokens"].get<size_t>());
  std::string text;
  for (const nlohmann::json& c : content) {
    const std::string token = c["token"];
    std::string bytes;
    for (int b : c["bytes"]) bytes += static_cast<char>(b);
    EXPECT_EQ(bytes, token);
    ASSERT_EQ(c["top_logprobs"].size(), 4u);
    EXPECT_EQ(c["top_logprobs"][0]["token"], token);  // greedy
    EXPECT_EQ(c["top_logprobs"][0]["logprob"], c["logprob"]);
    text += token;
  }
  EXPECT_EQ(text, r.json["choices"][0]["message"]["content"]);
  // logprobs: true alone: no alternatives.
  body.erase("top_logprobs");
  HttpResult bare = Send(body, /*chat=*/true);
  ASSERT_EQ(bare.status, 200) << bare.body;
  EXPECT_TRUE(bare.json["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
                  .empty());
}

// The chunks' logprobs, put together, are the whole answer's, bit for bit.
TEST_F(LogprobsApiTest, StreamedChunksAddUpToTheWholeAnswer) {
  for (const bool chat : {false, true}) {
    SCOPED_TRACE(chat ? "chat" : "completions");
    nlohmann::json body =
        chat ? ChatBody("Once upon a time", 10) : Body("Once upon a time", 10);
    if (chat) {
      body["logprobs"] = true;
      body["top_logprobs"] = 2;
    } else {
      body["logprobs"] = 2;
      body["echo"] = true;
    }
    HttpResult whole = Send(body, chat);
    ASSERT_EQ(whole.status, 200) << whole.body;
    body["stream"] = true;
    HttpResult streamed = Send(body, chat);
    ASSERT_EQ(streamed.status, 200) << streamed.body;
    nlohmann::json got = nlohmann::json::array();
    std::vector<nlohmann::json> tokens, token_logprobs;
    for (const nlohmann::json& e : Events(streamed.body)) {
      const nlohmann::json& lp = e["choices"][0]["logprobs"];
      ASSERT_FALSE(lp.is_null()) << e.dump();
      if (chat) {
        for (const auto& c : lp["content"]) got.push_back(c);
      } else {
        for (const auto& t : lp["token_logprobs"]) got.push_back(t);
      }
    }
    const nlohmann::json& want =
        chat ? whole.json["choices"][0]["logprobs"]["content"]
             : whole.json["choices"][0]["logprobs"]["token_logprobs"];
    EXPECT_EQ(got, want);
  }
}

// One greedy request's logprobs, alone and sent among 32 others of other
// tenants and lengths, through the whole disaggregated path.
TEST_F(LogprobsApiTest, AreBitIdenticalAloneAndAmongThirtyTwoRequests) {
  nlohmann::json probe = Body("Once upon a time there was a little dog", 12);
  probe["logprobs"] = 5;
  probe["echo"] = true;
  HttpResult alone = Send(probe);
  ASSERT_EQ(alone.status, 200) << alone.body;
  std::vector<HttpResult> results(32);
  std::vector<std::thread> threads;
  for (int i = 0; i < 32; ++i) {
    threads.emplace_back([&, i] {
      const nlohmann::json body =
          i == 16 ? probe : Body(LongPrompt(1 + i % 9), 6 + i % 11);
      results[i] = Post(cluster_->router(), "/v1/completions", body.dump(),
                        i % 2 ? "sk-globex" : "sk-acme");
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 32; ++i) ASSERT_EQ(results[i].status, 200) << i;
  EXPECT_EQ(results[16].json["choices"][0]["logprobs"],
            alone.json["choices"][0]["logprobs"]);
}

TEST_F(LogprobsApiTest, OutOfRangeOrInconsistentRequestsAre400s) {
  struct Case {
    bool chat;
    nlohmann::json extra;
    const char* param;
  };
  const std::vector<Case> cases = {
      {false, {{"logprobs", 21}}, "logprobs"},
      {false, {{"logprobs", true}}, "logprobs"},
      {false, {{"echo", 1}}, "echo"},
      {true, {{"top_logprobs", 2}}, "top_logprobs"},
      {true, {{"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs"},
      {true, {{"logprobs", 3}}, "logprobs"},
      {true, {{"echo", true}}, "echo"},
  };
  for (const Case& c : cases) {
    nlohmann::json body = c.chat ? ChatBody("Once", 2) : Body("Once", 2);
    body.update(c.extra);
    HttpResult r = Send(body, c.chat);
    EXPECT_EQ(r.status, 400) << body.dump() << " " << r.body;
    EXPECT_EQ(r.json["error"]["param"], c.param) << r.body;
  }
}

}  // namespace
}  // namespace kvcanary::testing
