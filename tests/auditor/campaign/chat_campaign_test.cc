// Campaigns over chat completions against scripted fakes
// (tests/auditor/fakes/fake_target.h): chat-only servers of every flavour,
// a chat template's header (reported cached, printing a date that changes
// mid-campaign, read by the model), and a model that follows instructions
// rather than continuing a story. Each clean, with the API and the wording
// calibration chose named.
#include <string>

#include "absl/strings/match.h"
#include "auditor/campaign/campaign.h"
#include "gtest/gtest.h"
#include "tests/auditor/campaign/campaign_fixtures.h"
#include "tests/auditor/fakes/fake_target.h"

namespace kvcanary::auditor {
namespace {

using testing::FakeTarget;
using testing::FakeTargetOptions;
using testing::Flavor;
using namespace campaign_fixtures;  // NOLINT: the fixtures of every test here

// Chat completions, chosen by --api=auto where the server has no
// /v1/completions (hosted providers, gateways) or answers it in a shape
// nobody documents: the campaign runs every detector that can run in chat,
// the result names the API, and the verdict is clean.
class ChatOnlyTest : public ::testing::TestWithParam<Flavor> {};

TEST_P(ChatOnlyTest, IsCleanOverChatWithTheApiNamed) {
  // A header and role markers around the prompt.
  FakeTargetOptions fo = testing::ChatOnly(Fake(GetParam()));
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url(), "chat-only"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.api, "chat");
  EXPECT_EQ(r.ToJson()["api"], "chat");
  EXPECT_NE(
      metrics.Serialize().find("kvcanary_auditor_target_api{api=\"chat\"} 1"),
      std::string::npos);
  EXPECT_EQ(Count(r, "prompt_truncated"), 0);
  EXPECT_EQ(Count(r, "boundary_accepted"), 0);
  // What chat cannot do is disabled with its reason; the rest is active
  // (log-probabilities where the flavor serves them).
  const bool logprobs =
      GetParam() != Flavor::kTgi && GetParam() != Flavor::kOllama;
  for (const DetectorCoverage& d : r.detectors) {
    SCOPED_TRACE(d.name);
    if (d.name == "prompt_logprobs") {
      EXPECT_EQ(d.state, DetectorState::kDisabled);
      EXPECT_TRUE(absl::StrContains(d.reason, "chat completions have no echo"))
          << d.reason;
    } else if (d.name == "trace" || d.name == "kv_events" ||
               (d.name == "logprob_golden" && !logprobs)) {
      EXPECT_EQ(d.state, DetectorState::kDisabled);
    } else {
      EXPECT_EQ(d.state, DetectorState::kActive) << d.reason;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Flavors, ChatOnlyTest,
                         ::testing::Values(Flavor::kVllm, Flavor::kSglang,
                                           Flavor::kLlamaCpp, Flavor::kTgi,
                                           Flavor::kOllama),
                         FlavorParamName);

// A chat template's header sits before every prompt's unique part, so a
// server with a prefix cache reports it cached on every request (vLLM's
// default): measured once as the shared head, it is no cache hit, and the
// campaign is clean with latency active.
TEST(CampaignTest, AChatTemplateHeaderReportedCachedIsCleanWithLatency) {
  FakeTargetOptions fo = testing::ChatOnly(Fake(Flavor::kVllm));
  fo.shared_prompt_cache = true;
  fo.report_cached_tokens = true;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url(), "cached-header"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.api, "chat");
  const DetectorCoverage* d = CoverageOf(r, "latency");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->state, DetectorState::kActive) << d->reason;
  EXPECT_GT(target.cached_tokens_served(), 0);
  // The header's whole blocks, reported cached on every request.
  int64_t cached = 0;
  for (const auto& [tenant, s] : r.spend) cached += s.cached_tokens;
  EXPECT_GE(cached, 16 * r.usable);
  // Its counts never moved: nothing was refit.
  for (const std::string& n : CoverageOf(r, "boundary")->notes) {
    EXPECT_FALSE(absl::StrContains(n, "count moved")) << n;
  }
}

// A chat model that answers a story instead of continuing it, and repeats
// only what it is told to: no story nonce echoes, so calibration words the
// probes as instructions ("Repeat exactly, and nothing else: ...") and
// echo runs in that wording; clean, every detector as over chat.
TEST(CampaignTest,
     AnInstructionModelGetsInstructionWordingChosenByCalibration) {
  FakeTargetOptions fo = testing::ChatOnly(Fake(Flavor::kVllm));
  fo.instruction_model = true;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url(), "instruct"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  const DetectorCoverage* echo = CoverageOf(r, "echo");
  ASSERT_NE(echo, nullptr);
  EXPECT_EQ(echo->state, DetectorState::kActive) << echo->reason;
  EXPECT_EQ(echo->stats["wording"], "instruct");
  EXPECT_EQ(echo->stats["tenants_with_echoing_nonce"], 3);
  const DetectorCoverage* golden = CoverageOf(r, "golden");
  ASSERT_NE(golden, nullptr);
  EXPECT_EQ(golden->state, DetectorState::kActive) << golden->reason;
}

// Over chat, a story model keeps the story wording it echoes in.
TEST(CampaignTest, AStoryModelOverChatKeepsStoryWording) {
  FakeTargetOptions fo = testing::ChatOnly(Fake(Flavor::kVllm));
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url(), "story-chat"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  const DetectorCoverage* echo = CoverageOf(r, "echo");
  ASSERT_NE(echo, nullptr);
  EXPECT_EQ(echo->stats["wording"], "story");
}

// A template that prints today's date crosses midnight mid-campaign: every
// prompt's count moves by one token at once. A short control alone moves
// as much, so the campaign refits, notes it on the boundary detector, and
// stays clean: never a prompt_truncated or prompt_tokens_mismatch. Where
// the model reads the date (its answer greets with the header's weekday),
// golden's answers alone change too: they are measured again at the
// refit, and the new ones are no divergence (before, every golden variant
// was a golden_mismatch and a logprob_mismatch).
class TemplateDateTest : public ::testing::TestWithParam<bool> {};

TEST_P(TemplateDateTest, ADateThatChangesMidCampaignIsRefitNotAFinding) {
  const bool model_reads_date = GetParam();
  FakeTargetOptions fo = testing::ChatOnly(Fake(Flavor::kVllm));
  fo.answer_names_date = model_reads_date;
  fo.template_date_change_after = 250;  // after calibration, mid-load
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url(), "date-change"), &metrics);
  ASSERT_GT(target.completions(), 300);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  for (const char* kind : {"prompt_truncated", "prompt_tokens_mismatch",
                           "golden_mismatch", "logprob_mismatch"}) {
    EXPECT_EQ(Count(r, kind), 0) << kind;
  }
  const DetectorCoverage* d = CoverageOf(r, "boundary");
  ASSERT_NE(d, nullptr);
  int refits = 0, rebaselined = 0;
  for (const std::string& n : d->notes) {
    refits += absl::StrContains(n, "every prompt's count moved by +1 tokens");
    rebaselined += absl::StrContains(n, "golden answers alone changed");
  }
  EXPECT_EQ(refits, 1) << Explain(r);
  EXPECT_EQ(rebaselined, model_reads_date ? 1 : 0) << Explain(r);
}

INSTANTIATE_TEST_SUITE_P(Models, TemplateDateTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return std::string(p.param ? "reads_the_date"
                                                      : "ignores_the_date");
                         });

// A /v1/completions that answers a 200 in a shape other than OpenAI's:
// llama.cpp's own (its releases before the OpenAI shape), read as text
// completions; one nobody documents, left for chat. Clean either way, the
// API named.
class NonOpenAiCompletionsTest
    : public ::testing::TestWithParam<testing::CompletionsRoute> {};

TEST_P(NonOpenAiCompletionsTest, ProbeIsCleanOverTheApiAutoChose) {
  FakeTargetOptions fo = Fake(Flavor::kLlamaCpp);
  fo.completions_route = GetParam();
  fo.chat_template = true;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url(), "non-openai"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.api, GetParam() == testing::CompletionsRoute::kLlamaNative
                       ? "completions"
                       : "chat");
  EXPECT_EQ(Count(r, "prompt_truncated"), 0);
  EXPECT_EQ(Count(r, "boundary_accepted"), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Routes, NonOpenAiCompletionsTest,
    ::testing::Values(testing::CompletionsRoute::kLlamaNative,
                      testing::CompletionsRoute::kUnknownShape),
    [](const ::testing::TestParamInfo<testing::CompletionsRoute>& p) {
      return p.param == testing::CompletionsRoute::kLlamaNative
                 ? std::string("llama_native")
                 : std::string("unknown_shape");
    });

}  // namespace
}  // namespace kvcanary::auditor
