// The official OpenAI Node SDK's requests, as scripts/openai_sdk_check.sh
// recorded them (tests/sdk/transcript.json: openai 7.60.0 reading
// logprobs, top_logprobs, echo + logprobs and n: 2, streamed and not),
// replayed against `up` with the SDK's own headers: each gets the status
// the SDK got, and an answer holding what the SDK read. Runs where npm
// cannot install the SDK (the live check, CTest OpenAiSdk.LiveCheck,
// then skips).
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

nlohmann::json Transcript() {
  std::ifstream in(std::string(KVCANARY_SOURCE_DIR) +
                   "/tests/sdk/transcript.json");
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str(), nullptr, false);
}

// The choices of a whole answer, or of every chunk of a streamed one
// (which must end in [DONE]).
nlohmann::json Choices(const std::string& body, bool stream) {
  if (!stream) return nlohmann::json::parse(body)["choices"];
  nlohmann::json choices = nlohmann::json::array();
  bool done = false;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!absl::ConsumePrefix(&line, "data: ")) continue;
    if (line == "[DONE]") {
      done = true;
      continue;
    }
    const nlohmann::json event = nlohmann::json::parse(line);
    for (const auto& c : event["choices"]) choices.push_back(c);
  }
  EXPECT_TRUE(done) << body;
  return choices;
}

void CheckAnswer(const nlohmann::json& request, const std::string& body) {
  const bool stream = request.value("stream", false);
  const bool chat = request.contains("messages");
  const nlohmann::json choices = Choices(body, stream);
  ASSERT_FALSE(choices.empty()) << body;
  int max_index = 0;
  for (const nlohmann::json& c : choices) {
    max_index = std::max(max_index, c["index"].get<int>());
    if (!request.contains("logprobs")) {
      EXPECT_TRUE(c["logprobs"].is_null()) << c.dump();
      continue;
    }
    const nlohmann::json& lp = c["logprobs"];
    ASSERT_TRUE(lp.is_object()) << c.dump();
    if (chat) {
      for (const nlohmann::json& t : lp["content"]) {
        EXPECT_TRUE(t["logprob"].is_number());
        EXPECT_EQ(t["top_logprobs"].size(), request.value("top_logprobs", 0u));
      }
    } else {
      for (const char* field :
           {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
        EXPECT_EQ(lp[field].size(), lp["tokens"].size()) << field;
      }
    }
  }
  EXPECT_EQ(max_index + 1, request.value("n", 1)) << body;
}

TEST(OpenAiSdkTranscriptTest, TheSdksRecordedRequestsGetWhatItRead) {
  const nlohmann::json transcript = Transcript();
  ASSERT_TRUE(transcript.is_array() && !transcript.empty())
      << "tests/sdk/transcript.json is missing or not JSON";
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  for (const nlohmann::json& entry : transcript) {
    SCOPED_TRACE(entry.dump());
    httplib::Client client(cluster.router());
    httplib::Headers headers = {{"Authorization", "Bearer sk-acme"}};
    for (const auto& [name, value] : entry["headers"].items()) {
      if (name != "content-type") headers.emplace(name, value);
    }
    const std::string path = entry["path"];
    httplib::Result res = entry["method"] == "GET"
                              ? client.Get(path, headers)
                              : client.Post(path, headers, entry["body"].dump(),
                                            "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, entry["status"].get<int>()) << res->body;
    if (entry["method"] == "POST" && res->status == 200) {
      CheckAnswer(entry["body"], res->body);
    }
  }
}

}  // namespace
}  // namespace kvcanary::testing
