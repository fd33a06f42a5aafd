// sample-wrong-row with real processes: concurrent requests' answers leave
// their own answers alone (the batch-invariant engine gives the same answer
// alone and in any batch, so any change is the fault's), though every
// request is served 200 under --watermark=enforce and the decode node's
// trace holds no violation: no page is read across owners.
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

const char* const kPromptKeys[] = {"sk-acme", "sk-globex", "sk-acme",
                                   "sk-initech"};

std::string Body(int i) { return Completion(LongPrompt(3 + 2 * i), 48); }

std::string Text(const HttpResult& r) {
  if (!r.json.is_object() || !r.json.contains("choices")) return "";
  return r.json["choices"][0].value("text", "");
}

struct SampleRun {
  int rounds = 0;
  int moved = 0;    // concurrent answers that differ from alone
  int answers = 0;  // concurrent answers, all 200
  int violations = 0;
};

// The four prompts alone, then up to `max_rounds` rounds of the four at
// once, until an answer moves (every round where `stop_on_move` is false).
SampleRun RunConcurrent(const std::vector<std::string>& flags, int max_rounds,
                        bool stop_on_move) {
  std::vector<std::string> args = {"--watermark=enforce"};
  args.insert(args.end(), flags.begin(), flags.end());
  Cluster cluster(args);
  SampleRun run;
  EXPECT_TRUE(cluster.ok());
  if (!cluster.ok()) return run;
  std::vector<std::string> alone;
  for (int i = 0; i < 4; ++i) {
    const HttpResult r =
        Post(cluster.router(), "/v1/completions", Body(i), kPromptKeys[i]);
    EXPECT_EQ(r.status, 200) << r.body;
    alone.push_back(Text(r));
  }
  TraceTap tap(cluster.decode(), cluster.trace_token());
  for (; run.rounds < max_rounds; ++run.rounds) {
    std::vector<HttpResult> got(4);
    std::vector<std::thread> clients;
    for (int i = 0; i < 4; ++i) {
      clients.emplace_back([&, i] {
        got[i] =
            Post(cluster.router(), "/v1/completions", Body(i), kPromptKeys[i]);
      });
    }
    for (std::thread& t : clients) t.join();
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(got[i].status, 200) << got[i].body;
      run.answers += got[i].status == 200;
      run.moved += got[i].status == 200 && Text(got[i]) != alone[i];
    }
    if (stop_on_move && run.moved > 0) break;
  }
  run.violations = CountViolations(tap.Stop());
  return run;
}

TEST(SampleWrongRowFaultTest, ConcurrentAnswersMoveWithNoViolation) {
  const SampleRun run = RunConcurrent({"--fault=sample-wrong-row"}, 20, true);
  EXPECT_GT(run.moved, 0) << "in " << run.rounds << " rounds";
  EXPECT_EQ(run.violations, 0);
}

TEST(SampleWrongRowFaultTest, OffConcurrentAnswersAreTheAnswersAlone) {
  const SampleRun run = RunConcurrent({}, 3, false);
  EXPECT_EQ(run.answers, 12);
  EXPECT_EQ(run.moved, 0);
  EXPECT_EQ(run.violations, 0);
}

}  // namespace
}  // namespace kvcanary::testing
