// `n` through the router: each choice a sequence of its own (own id, own
// seed), choice 0 first so the others find the prompt's pages in the
// prefill node's prefix cache; whole and streamed answers in OpenAI's
// shape; and the choices count against the tenant's in-flight limit.
#include <algorithm>
#include <chrono>
#include <set>
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

class ChoicesTest : public SharedClusterTest {
 protected:
  static HttpResult Send(const nlohmann::json& body, bool chat = false) {
    return Post(cluster_->router(),
                chat ? "/v1/chat/completions" : "/v1/completions", body.dump(),
                "sk-acme");
  }
};

std::vector<nlohmann::json> Events(const std::string& body, bool* done) {
  std::vector<nlohmann::json> events;
  *done = false;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!absl::ConsumePrefix(&line, "data: ")) continue;
    if (line == "[DONE]") {
      *done = true;
      continue;
    }
    events.push_back(nlohmann::json::parse(line));
  }
  return events;
}

TEST_F(ChoicesTest, EachChoiceIsItsOwnSequenceSharingThePromptsPages) {
  const double hits_before =
      PrefillMetric(*cluster_, "kvcanary_node_prefix_cache_hit_pages_total");
  nlohmann::json body = {{"prompt", LongPrompt(40)},
                         {"max_tokens", 12},
                         {"temperature", 1.0},
                         {"n", 3},
                         {"logprobs", 1}};
  HttpResult r = Send(body);
  ASSERT_EQ(r.status, 200) << r.body;
  const nlohmann::json& choices = r.json["choices"];
  ASSERT_EQ(choices.size(), 3u);
  int completion = 0;
  std::set<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(choices[i]["index"], i);
    texts.insert(choices[i]["text"].get<std::string>());
    completion += static_cast<int>(choices[i]["logprobs"]["tokens"].size());
  }
  EXPECT_EQ(r.json["usage"]["completion_tokens"], completion);
  EXPECT_GT(texts.size(), 1u) << "choices sample with their own seeds";
  // Choices 1 and 2 read choice 0's full prompt pages from the cache.
  const double hits =
      PrefillMetric(*cluster_, "kvcanary_node_prefix_cache_hit_pages_total") -
      hits_before;
  EXPECT_GE(hits, 2 * ((r.json["usage"]["prompt_tokens"].get<int>() - 1) / 16))
      << r.body;
  // The same seed gives the same choices again.
  body["seed"] = 7;
  HttpResult a = Send(body), b = Send(body);
  EXPECT_EQ(a.json["choices"], b.json["choices"]);
}

TEST_F(ChoicesTest, AStreamCarriesEveryChoiceThenTheUsage) {
  for (const bool chat : {false, true}) {
    SCOPED_TRACE(chat ? "chat" : "completions");
    nlohmann::json body = {{"max_tokens", 8}, {"temperature", 0}, {"n", 2}};
    if (chat) {
      body["messages"] = {{{"role", "user"}, {"content", "Once upon"}}};
    } else {
      body["prompt"] = "Once upon";
    }
    HttpResult whole = Send(body, chat);
    ASSERT_EQ(whole.status, 200) << whole.body;
    body["stream"] = true;
    HttpResult streamed = Send(body, chat);
    ASSERT_EQ(streamed.status, 200) << streamed.body;
    bool done = false;
    const std::vector<nlohmann::json> events = Events(streamed.body, &done);
    EXPECT_TRUE(done);
    ASSERT_FALSE(events.empty());
    std::string text[2];
    int finished[2] = {0, 0};
    for (size_t e = 0; e + 1 < events.size(); ++e) {
      ASSERT_EQ(events[e]["choices"].size(), 1u) << events[e].dump();
      EXPECT_FALSE(events[e].contains("usage")) << events[e].dump();
      const nlohmann::json& c = events[e]["choices"][0];
      const int i = c["index"];
      ASSERT_TRUE(i == 0 || i == 1);
      EXPECT_EQ(finished[i], 0) << "a chunk after choice " << i << " ended";
      if (!c["finish_reason"].is_null()) ++finished[i];
      if (chat) {
        text[i] += c["delta"].value("content", "");
      } else {
        text[i] += c["text"].get<std::string>();
      }
    }
    EXPECT_EQ(finished[0], 1);
    EXPECT_EQ(finished[1], 1);
    const nlohmann::json& last = events.back();
    EXPECT_TRUE(last["choices"].empty()) << last.dump();
    EXPECT_EQ(last["usage"], whole.json["usage"]);
    for (int i = 0; i < 2; ++i) {
      const nlohmann::json& c = whole.json["choices"][i];
      EXPECT_EQ(text[i], chat ? c["message"]["content"] : c["text"]);
    }
    EXPECT_EQ(text[0], text[1]);  // greedy: the same sequence twice
  }
}

TEST_F(ChoicesTest, ChoicesOverTheBoundAre400) {
  HttpResult r = Send({{"prompt", "Once"}, {"max_tokens", 1}, {"n", 9}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json["error"]["param"], "n") << r.body;
}

// Each choice takes a place in the tenant's in-flight limit: a tenant
// limited to 2 cannot have 3 sequences decoding through `n`. With one
// request in flight (each transfer held 500 ms), 2 more choices do not fit
// now (429); 3 could never fit (400, naming the limit, so a client does not
// retry for ever).
TEST(ChoicesLimitTest, ChoicesCountAgainstTheTenantsInFlightLimit) {
  Cluster cluster({"--test_kv_receive_delay_ms=500"},
                  R"({"tenants": [{"id": "acme", "api_keys": ["sk-acme"],
                           "max_concurrent_requests": 2}]})");
  ASSERT_TRUE(cluster.ok());
  auto body = [](int n) {
    return nlohmann::json{{"prompt", "Once"}, {"max_tokens", 2}, {"n", n}}
        .dump();
  };
  HttpResult never =
      Post(cluster.router(), "/v1/completions", body(3), "sk-acme");
  EXPECT_EQ(never.status, 400) << never.body;
  EXPECT_EQ(never.json["error"]["param"], "n") << never.body;
  EXPECT_NE(never.body.find("at most 2 requests in flight"), std::string::npos)
      << never.body;
  // One choice and two, overlapping: whichever comes second does not fit.
  int one = 0;
  std::thread first([&] {
    one = Post(cluster.router(), "/v1/completions", body(1), "sk-acme").status;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const int two =
      Post(cluster.router(), "/v1/completions", body(2), "sk-acme").status;
  first.join();
  EXPECT_EQ(std::min(one, two), 200) << one << " " << two;
  EXPECT_EQ(std::max(one, two), 429) << one << " " << two;
  // Alone, two fit.
  EXPECT_EQ(
      Post(cluster.router(), "/v1/completions", body(2), "sk-acme").status,
      200);
}

}  // namespace
}  // namespace kvcanary::testing
