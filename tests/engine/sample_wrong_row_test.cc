// The sample-wrong-row fault (engine/core/faults.h): batched sampling takes
// the next decoding sequence's row of the step's logits.
#include <string>
#include <vector>

#include "engine/core/engine.h"
#include "engine/core/faults.h"
#include "gtest/gtest.h"
#include "tests/engine/test_models.h"

namespace kvcanary::engine {
namespace {

struct Outcome {
  std::vector<std::vector<int>> outputs;
  size_t violations = 0;
};

// Runs `prompts` (tenant `tenants[i]` each) together, all joining the
// decode batch at the same step; greedy, 40 tokens.
Outcome RunTogether(const testing::RealModel& m,
                    const std::vector<std::string>& prompts,
                    const std::vector<uint32_t>& tenants, bool fault,
                    int steps = 8) {
  EngineOptions o;
  o.watermark = WatermarkMode::kEnforce;
  o.sample_wrong_row_steps = steps;
  if (fault) o.faults.add(Fault::kSampleWrongRow);
  Engine engine(&m.model, o);
  std::vector<RequestId> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams s;
    s.max_tokens = 40;
    s.ignore_eos = true;
    auto id = engine.Submit(TenantId(tenants[i]),
                            m.tokenizer.Encode(prompts[i], true, false), s);
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  engine.RunUntilIdle();
  Outcome r;
  for (RequestId id : ids) {
    const Sequence* seq = engine.Get(id);
    EXPECT_TRUE(seq->state.finished());
    EXPECT_NE(seq->state.finish_reason(), FinishReason::kAbort);
    r.outputs.push_back(seq->output);
    r.violations += seq->violations.size();
  }
  return r;
}

// Two stories260K openings whose greedy answers differ.
const std::vector<std::string>& TwoPrompts() {
  static const auto* p =
      new std::vector<std::string>{"Once upon a time", "The little dog"};
  return *p;
}

TEST(SampleWrongRowTest, IsListedAndParsed) {
  auto set = FaultSet::Parse("sample-wrong-row");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_TRUE(set->has(Fault::kSampleWrongRow));
  EXPECT_EQ(set->ToString(), "sample-wrong-row");
  EXPECT_EQ(EngineOptions().sample_wrong_row_steps, 8);
}

// Two sequences join the decode batch together: at their first decode
// step each gets the token the other's logits give (what the other answers
// alone there), though no page is read across owners and the watermark
// check, enforcing, sees nothing. The prefill's token is untouched.
TEST(SampleWrongRowTest, EachSequenceTakesTheNextOnesTokenWithNoViolation) {
  KVC_REQUIRE_STORIES260K(m);
  const std::vector<std::string>& prompts = TwoPrompts();
  const Outcome a_alone = RunTogether(*m, {prompts[0]}, {1}, true);
  const Outcome b_alone = RunTogether(*m, {prompts[1]}, {2}, true);
  const Outcome healthy = RunTogether(*m, prompts, {1, 2}, false);
  EXPECT_EQ(healthy.outputs[0], a_alone.outputs[0]);  // alone: never fires
  EXPECT_EQ(healthy.outputs[1], b_alone.outputs[0]);
  const Outcome faulty = RunTogether(*m, prompts, {1, 2}, true);
  EXPECT_EQ(faulty.violations, 0u);
  ASSERT_GE(faulty.outputs[0].size(), 2u);
  EXPECT_EQ(faulty.outputs[0][0], a_alone.outputs[0][0]);
  EXPECT_EQ(faulty.outputs[1][0], b_alone.outputs[0][0]);
  EXPECT_EQ(faulty.outputs[0][1], b_alone.outputs[0][1]);
  EXPECT_EQ(faulty.outputs[1][1], a_alone.outputs[0][1]);
  EXPECT_NE(faulty.outputs[0], a_alone.outputs[0]);
  EXPECT_NE(faulty.outputs[1], b_alone.outputs[0]);
}

// The bug does not know tenants: two requests of one tenant mix as much.
TEST(SampleWrongRowTest, RequestsOfOneTenantMixAsMuch) {
  KVC_REQUIRE_STORIES260K(m);
  const std::vector<std::string>& prompts = TwoPrompts();
  const Outcome two_tenants = RunTogether(*m, prompts, {1, 2}, true);
  const Outcome one_tenant = RunTogether(*m, prompts, {7, 7}, true);
  EXPECT_EQ(one_tenant.outputs, two_tenants.outputs);
  EXPECT_EQ(one_tenant.violations, 0u);
}

// It lasts R steps: with R = 1 only the first decode step takes the wrong
// row, so the answers leave their own only from there, and a longer R
// moves them further.
TEST(SampleWrongRowTest, FiresForTheGivenNumberOfSteps) {
  KVC_REQUIRE_STORIES260K(m);
  const std::vector<std::string>& prompts = TwoPrompts();
  const Outcome a_alone = RunTogether(*m, {prompts[0]}, {1}, false);
  const Outcome b_alone = RunTogether(*m, {prompts[1]}, {2}, false);
  const Outcome one = RunTogether(*m, prompts, {1, 2}, true, 1);
  EXPECT_EQ(one.outputs[0][1], b_alone.outputs[0][1]);
  EXPECT_EQ(one.outputs[1][1], a_alone.outputs[0][1]);
  const Outcome many = RunTogether(*m, prompts, {1, 2}, true, 1000);
  // Mixed at every step, not at the first only: other answers.
  EXPECT_NE(many.outputs, one.outputs);
}

}  // namespace
}  // namespace kvcanary::engine
