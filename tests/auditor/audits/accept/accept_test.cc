// The long-context acceptance sweep (`kvcanary-auditor accept`): its plan
// (every page boundary ±1, powers of two, the limit, past it), prompts
// built to a length from measured filler, and whole sweeps against scripted
// fakes (tests/auditor/fakes/fake_target.h) and a small scripted server: clean
// on a well-behaved target, findings at the first length past the limit on a
// target that silently keeps the tail, a 5xx past the limit is not a
// refusal, inconclusive when nothing can check the processing.
#include "auditor/audits/accept/accept.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "auditor/audits/accept/plan.h"
#include "auditor/campaign/calibrate.h"
#include "auditor/reports/report.h"
#include "canaries/marker.h"
#include "common/http_server.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/auditor/fakes/fake_target.h"
#include "tests/temp_path.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;
using testing::FakeTarget;
using testing::FakeTargetOptions;
using testing::FakeTokenCount;
using testing::Flavor;
using testing::OverLimit;

std::string Db(const std::string& name) {
  return testing_paths::UniqueTempPath("kvcanary-accept", name + ".db");
}

AcceptOptions Options(const std::string& target, const std::string& name) {
  AcceptOptions o;
  o.target.target = target;
  o.target.tenants = {
      {"acme", "sk-a"}, {"globex", "sk-g"}, {"initech", "sk-i"}};
  o.db_path = Db(name);
  o.page_tokens = 16;
  o.repeats = 3;
  o.concurrency = 4;
  o.progress = false;
  return o;
}

// A vLLM-style fake processing at most 96 tokens (it advertises 97, its
// max_model_len): the sweep's limit is 97 - 16 = 81 within, 97 to refuse.
FakeTargetOptions Fake(OverLimit over = OverLimit::kReject) {
  FakeTargetOptions o;
  o.flavor = Flavor::kVllm;
  o.limit_tokens = 96;
  o.over_limit = over;
  o.prefill_us_per_token = 0;
  return o;
}

std::string Explain(const CampaignResult& r) {
  std::string out = absl::StrCat(VerdictName(r.verdict), ": ",
                                 absl::StrJoin(r.reasons, "; "), "\n");
  for (const DetectorCoverage& d : r.detectors) {
    absl::StrAppend(&out, d.name, " ", DetectorStateName(d.state), " ",
                    d.reason, " [", d.CoverageText(), "]\n");
  }
  for (const Check& c : r.checks) {
    if (c.state == "failed" || c.state == "error") {
      absl::StrAppend(&out, c.state, " ", c.check, " ", c.subject, ": ",
                      c.message, "\n");
    }
  }
  for (const auto& [k, v] : r.details.items()) {
    if (!v.is_object()) absl::StrAppend(&out, k, ": ", v.dump(), "\n");
  }
  return out;
}

const Check* FindCheck(const CampaignResult& r, const std::string& check,
                       const std::string& subject) {
  for (const Check& c : r.checks) {
    if (c.check == check && c.subject == subject) return &c;
  }
  return nullptr;
}

std::vector<const Check*> Failed(const CampaignResult& r) {
  std::vector<const Check*> out;
  for (const Check& c : r.checks) {
    if (c.state == "failed") out.push_back(&c);
  }
  return out;
}

int Count(const CampaignResult& r, const std::string& kind) {
  int n = 0;
  for (const Finding& f : r.findings) n += f.kind == kind;
  return n;
}

bool ValidatesAgainstSchema(const CampaignResult& r) {
  const std::string doc = ::testing::TempDir() + "/kvcanary-accept-result-" +
                          std::to_string(getpid()) + ".json";
  std::ofstream(doc) << r.ToJson().dump(2);
  const std::string cmd = absl::StrCat(
      "python3 -c 'import json,sys,jsonschema; "
      "s=json.load(open(sys.argv[1])); d=json.load(open(sys.argv[2])); "
      "jsonschema.Draft202012Validator(s).validate(d)' ",
      KVCANARY_SOURCE_DIR, "/docs/campaign-result.schema.json ", doc);
  return std::system(cmd.c_str()) == 0;
}

// ---- The plan.

std::set<int> Tokens(const std::vector<SweepLength>& v, bool past) {
  std::set<int> out;
  for (const SweepLength& l : v) {
    if (l.past == past) out.insert(l.tokens);
  }
  return out;
}

TEST(AcceptPlanTest, CoversEveryPageBoundaryPowersOfTwoTheLimitAndPastIt) {
  const auto plan = PlanLengths(16, 9, 81, 97, 16384);
  const std::set<int> within = Tokens(plan, false);
  EXPECT_EQ(within, (std::set<int>{15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64,
                                   65, 79, 80, 81}));
  EXPECT_EQ(Tokens(plan, true), (std::set<int>{98, 113, 194}));
  for (const SweepLength& l : plan) {
    if (l.tokens == 64) {
      EXPECT_EQ(l.why,
                (std::vector<std::string>{"page_boundary", "power_of_two"}));
    }
    if (l.tokens == 81) {
      EXPECT_EQ(l.why.back(), "limit");
    }
  }
  // A limit off the page grid is swept itself; nothing below the shortest
  // prompt; the last past length at most max_past_extra past.
  const auto odd = PlanLengths(16, 20, 70, 70, 8);
  EXPECT_EQ(Tokens(odd, false),
            (std::set<int>{31, 32, 33, 47, 48, 49, 63, 64, 65, 70}));
  EXPECT_EQ(Tokens(odd, true), (std::set<int>{71, 78, 86}));
  // No limit to refuse above: nothing past.
  EXPECT_TRUE(Tokens(PlanLengths(16, 9, 81, 0, 16384), true).empty());
}

TEST(AcceptPlanTest,
     FillHitsEachLengthExactlyWithPadsElseNearestOnTheSafeSide) {
  FillerModel m;
  m.unit_tokens = 6;
  m.base[PromptKind::kCount] = 9;
  m.pad = " a";
  auto f = FillFor(m, PromptKind::kCount, 32);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->units, 3);
  EXPECT_EQ(f->pads, 5);
  EXPECT_EQ(f->predicted, 32);
  EXPECT_FALSE(FillFor(m, PromptKind::kCount, 8).has_value());
  EXPECT_FALSE(FillFor(m, PromptKind::kGolden, 32).has_value());  // unmeasured
  m.pad.clear();
  EXPECT_EQ(FillFor(m, PromptKind::kCount, 32)->predicted, 27);  // below
  EXPECT_EQ(FillFor(m, PromptKind::kCount, 32, true)->predicted, 33);
  EXPECT_EQ(FillFor(m, PromptKind::kCount, 33, true)->predicted, 33);
}

// With the fake's own tokenizer standing in for a target's counts, every
// kind's predicted count is the count of the prompt built to it.
TEST(AcceptPlanTest, PromptsCountWhatTheirFillPredicts) {
  const canaries::Marker nonce = canaries::DeriveNonce("k", "acme", "c", 3);
  FillerModel m;
  m.pad = " a";
  m.unit_tokens = FakeTokenCount(BoundaryPrompt("Ticket 0123456789.", 2)) -
                  FakeTokenCount(BoundaryPrompt("Ticket 0123456789.", 1));
  for (PromptKind kind : kAllPromptKinds) {
    const std::string one = BuildAcceptPrompt(kind, "Ticket 0123456789.",
                                              Fill{1, 0, 0}, m.pad, &nonce);
    m.base[kind] = FakeTokenCount(one) - m.unit_tokens;
  }
  for (PromptKind kind : kAllPromptKinds) {
    for (int target : {47, 64, 65, 200, 257}) {
      auto f = FillFor(m, kind, target);
      ASSERT_TRUE(f.has_value()) << PromptKindName(kind) << " " << target;
      const std::string p =
          BuildAcceptPrompt(kind, "Ticket 9876543210.", *f, m.pad, &nonce);
      EXPECT_EQ(FakeTokenCount(p), target) << PromptKindName(kind) << ": " << p;
    }
  }
  // The nonce is where the kind says: first, between the halves, last.
  const Fill f{40, 0, 0};
  auto at = [&](PromptKind k) {
    const std::string p = BuildAcceptPrompt(k, "T.", f, "", &nonce);
    return static_cast<double>(p.find(nonce.text)) / p.size();
  };
  EXPECT_LT(at(PromptKind::kEchoStart), 0.2);
  EXPECT_GT(at(PromptKind::kEchoMiddle), 0.3);
  EXPECT_LT(at(PromptKind::kEchoMiddle), 0.7);
  EXPECT_GT(at(PromptKind::kEchoEnd), 0.7);
  EXPECT_EQ(ShortEchoPrompt("T.", nonce),
            BuildAcceptPrompt(PromptKind::kEchoEnd, "T.", Fill{}, "", &nonce));
}

TEST(AcceptPlanTest, NonceSharingAWordWithTheFillerIsPassedOver) {
  canaries::Marker n;
  n.words = {canaries::MarkerWordIndex("ball"), 0, 1, 2};
  n.text = absl::StrJoin(
      {std::string("ball"), canaries::MarkerWordList()[0],
       canaries::MarkerWordList()[1], canaries::MarkerWordList()[2]},
      " ");
  EXPECT_FALSE(NonceStandsOut(n));
  int standing = 0;
  for (int k = 0; k < 32; ++k) {
    standing += NonceStandsOut(canaries::DeriveNonce("k", "acme", "c", k));
  }
  EXPECT_GT(standing, 16);
}

TEST(AcceptPlanTest, RangesJoinConsecutiveLengths) {
  EXPECT_EQ(RangesText({15, 16, 17, 31, 32, 33, 64, 81}),
            "15..17, 31..33, 64, 81");
  EXPECT_EQ(RangesText({}), "");
}

// ---- Whole sweeps against fakes.

TEST(AcceptTest, WellBehavedTargetIsCleanWithEchoCoveredAndRefusalsPastIt) {
  FakeTarget target(Fake());
  AuditorMetrics metrics;
  const CampaignResult r = RunAccept(Options(target.url(), "clean"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.command, "accept");
  // Every page boundary ±1 within 81 and three lengths past 97.
  for (const char* subject : {"length 15", "length 16", "length 17",
                              "length 64", "length 80", "length 81"}) {
    const Check* c = FindCheck(r, "prompt_tokens", subject);
    ASSERT_NE(c, nullptr) << subject;
    EXPECT_EQ(c->state, "passed") << subject << ": " << c->message;
  }
  for (const char* subject : {"length 98", "length 113", "length 194"}) {
    const Check* c = FindCheck(r, "refusal", subject);
    ASSERT_NE(c, nullptr) << subject;
    EXPECT_EQ(c->state, "passed") << c->message;
  }
  // The fake answers with the tail of the prompt: the end nonce comes back
  // at every length it fits, the start one only where the prompt is short.
  const Check* end = FindCheck(r, "echo", "length 81, end");
  ASSERT_NE(end, nullptr);
  EXPECT_EQ(end->state, "passed") << end->message;
  const Check* start = FindCheck(r, "echo", "length 81, start");
  ASSERT_NE(start, nullptr);
  EXPECT_EQ(start->state, "skipped");
  EXPECT_NE(start->message.find("not covered: echoed 0 of 3"),
            std::string::npos);
  EXPECT_NE(r.details["echo"].get<std::string>().find("end "),
            std::string::npos)
      << r.details.dump(2);
  EXPECT_EQ(FindCheck(r, "golden", "length 81")->state, "passed");
  // Exact to the token: a one-token pad was found by measurement.
  EXPECT_EQ(r.details["sweep"]["filler"]["pad"], " a");
  EXPECT_EQ(r.details["sweep"]["refuse_above"], 97);
  EXPECT_TRUE(r.incidents.empty());
  if (std::system("python3 -c 'import jsonschema' >/dev/null 2>&1") == 0) {
    EXPECT_TRUE(ValidatesAgainstSchema(r)) << r.ToJson().dump(2);
  }
}

// A server without /v1/completions, rendering chat through a template
// (a header and role markers): --api=auto sweeps over chat, every check as
// over completions, and the result names the API.
TEST(AcceptTest, AChatOnlyTargetIsSweptOverChat) {
  FakeTargetOptions fo = Fake();
  fo = testing::ChatOnly(fo);
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r = RunAccept(Options(target.url(), "chat"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.api, "chat");
  for (const char* subject : {"length 98", "length 113", "length 194"}) {
    const Check* c = FindCheck(r, "refusal", subject);
    ASSERT_NE(c, nullptr) << subject;
    EXPECT_EQ(c->state, "passed") << c->message;
  }
  EXPECT_EQ(FindCheck(r, "golden", "length 81")->state, "passed");
}

// Every flavour's chat-only fake, through its template: clean, the API
// named (what each refuses and how is the flavour's own).
TEST(AcceptTest, EveryFlavoursChatOnlyFakeIsSweptCleanOverChat) {
  for (Flavor flavor : {Flavor::kVllm, Flavor::kSglang, Flavor::kLlamaCpp,
                        Flavor::kTgi, Flavor::kOllama}) {
    SCOPED_TRACE(testing::FlavorName(flavor));
    FakeTargetOptions fo = Fake();
    fo.flavor = flavor;
    FakeTarget target(testing::ChatOnly(fo));
    AuditorMetrics metrics;
    const CampaignResult r =
        RunAccept(Options(target.url(),
                          absl::StrCat("chat-", testing::FlavorName(flavor))),
                  &metrics);
    EXPECT_EQ(r.verdict, Verdict::kClean) << Explain(r);
    EXPECT_EQ(r.exit_code(), 0);
    EXPECT_EQ(r.api, "chat");
  }
}

// A /v1/completions answering a non-OpenAI 200: llama.cpp's own shape
// swept over it, an unknown one over chat; each clean, the API named.
TEST(AcceptTest, ANonOpenAiCompletionsBodyIsSweptOverTheApiAutoChose) {
  for (const auto& [route, api] :
       {std::pair{testing::CompletionsRoute::kLlamaNative, "completions"},
        std::pair{testing::CompletionsRoute::kUnknownShape, "chat"}}) {
    SCOPED_TRACE(api);
    FakeTargetOptions fo = Fake();
    fo.flavor = Flavor::kLlamaCpp;
    fo.completions_route = route;
    fo.chat_template = true;
    FakeTarget target(fo);
    AuditorMetrics metrics;
    const CampaignResult r =
        RunAccept(Options(target.url(), absl::StrCat("shape-", api)), &metrics);
    ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
    EXPECT_EQ(r.exit_code(), 0);
    EXPECT_EQ(r.api, api);
  }
}

TEST(AcceptTest, SilentTailKeepingFailsAtTheFirstLengthPastTheLimit) {
  FakeTarget target(Fake(OverLimit::kKeepTail));
  AuditorMetrics metrics;
  const CampaignResult r = RunAccept(Options(target.url(), "tail"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(r.exit_code(), 1);
  const std::vector<const Check*> failed = Failed(r);
  ASSERT_FALSE(failed.empty());
  // The first failure is the first length past the limit; nothing within
  // the limit failed.
  EXPECT_EQ(failed[0]->subject, "length 98");
  for (const Check* c : failed) {
    const int length = std::stoi(c->subject.substr(7));
    EXPECT_GT(length, 97) << c->check << " " << c->subject;
  }
  EXPECT_EQ(FindCheck(r, "refusal", "length 98")->state, "failed");
  EXPECT_EQ(FindCheck(r, "prompt_tokens", "length 98")->state, "failed");
  EXPECT_GE(Count(r, "boundary_accepted"), 6);  // 3 lengths, plain + stream
  EXPECT_GE(Count(r, "prompt_truncated"), 6);
  const std::string junit = JunitXml(r.ToJson());
  EXPECT_NE(junit.find("classname=\"kvcanary.accept.refusal\" name=\"length "
                       "98\" time=\"0\">\n      <failure"),
            std::string::npos)
      << junit;
  EXPECT_NE(junit.find("classname=\"kvcanary.accept.prompt_tokens\" "
                       "name=\"length 98\" time=\"0\">\n      <failure"),
            std::string::npos);
}

TEST(AcceptTest, UnderLoadTheGoldenAnswerIsTheOneRecordedAlone) {
  FakeTarget target(Fake());
  AuditorMetrics metrics;
  AcceptOptions o = Options(target.url(), "load");
  o.load = 2;
  const CampaignResult r = RunAccept(o, &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  const Check* g = FindCheck(r, "golden_under_load", "length 64");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->state, "passed") << g->message;
  EXPECT_GT(r.details["sweep"]["load"]["answered"].get<int>(), 0);
  EXPECT_EQ(r.details["sweep"]["load"]["tenants"], json({"globex", "initech"}));
  EXPECT_EQ(r.tenants, (std::vector<std::string>{"acme", "globex", "initech"}));
}

TEST(AcceptTest, UnadvertisedLimitIsMeasuredByTheLadder) {
  FakeTargetOptions fo = Fake();
  fo.advertise_limit = false;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r = RunAccept(Options(target.url(), "ladder"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.limit.source, "measured");
  // The ladder's doubling and bisection by units, then pads to the token.
  EXPECT_EQ(r.limit.prompt_tokens, 96) << r.limit.where;
  EXPECT_EQ(r.limit.refuse_above, 96) << r.limit.where;
  EXPECT_EQ(FindCheck(r, "refusal", "length 97")->state, "passed");
  EXPECT_EQ(FindCheck(r, "prompt_tokens", "length 96")->state, "passed");
}

// Issue 22 (a): a server that keeps the head and tail of an over-long
// prompt and advertises no limit. The sweep's limit is its true one; no
// length it processed whole is called "not refused".
TEST(AcceptTest, HeadAndTailKeepingIsSweptToItsTrueLimit) {
  FakeTargetOptions fo = Fake(OverLimit::kKeepHeadAndTail);
  fo.flavor = Flavor::kLlamaCpp;
  fo.advertise_limit = false;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunAccept(Options(target.url(), "head-tail"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(r.limit.source, "measured") << r.limit.where;
  EXPECT_EQ(r.limit.prompt_tokens, 96) << r.limit.where;
  EXPECT_EQ(r.limit.refuse_above, 96) << r.limit.where;
  EXPECT_EQ(FindCheck(r, "prompt_tokens", "length 96")->state, "passed");
  const std::vector<const Check*> failed = Failed(r);
  ASSERT_FALSE(failed.empty());
  EXPECT_EQ(failed[0]->subject, "length 97");
  for (const Check* c : failed) {
    EXPECT_GT(std::stoi(c->subject.substr(7)), 96)
        << c->check << " " << c->subject << ": " << c->message;
  }
  for (const Finding& f : r.findings) {
    if (f.detector != "boundary") continue;
    EXPECT_GT(f.detail["predicted_prompt_tokens"].get<int>(), 96)
        << f.ToJson().dump();
  }
  EXPECT_GT(Count(r, "boundary_accepted"), 0);
}

// Issue 22 (c): every key in the tenants file is checked before the sweep,
// used or not; the last of four wrong is exit 2 naming it.
TEST(AcceptTest, AWrongKeyForTheLastOfFourTenantsIsAnErrorNamingIt) {
  FakeTargetOptions fo = Fake();
  fo.api_keys = {{"sk-a", "acme"},
                 {"sk-g", "globex"},
                 {"sk-i", "initech"},
                 {"sk-u", "umbrella"}};
  FakeTarget target(fo);
  AuditorMetrics metrics;
  AcceptOptions o = Options(target.url(), "wrong-last-key");
  o.target.tenants.push_back({"umbrella", "sk-WRONG"});
  const CampaignResult r = RunAccept(o, &metrics);
  EXPECT_EQ(r.verdict, Verdict::kError) << Explain(r);
  EXPECT_EQ(r.exit_code(), 2);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_NE(r.reasons[0].find("'umbrella'"), std::string::npos) << r.reasons[0];
  EXPECT_EQ(target.completions(), 4);  // the key checks, nothing more
}

// Issue 22 (d), and a command that uses fewer tenants than the file holds
// says which it used.
TEST(AcceptTest, ABaseUrlEndingInV1WorksAndTheTenantsUsedAreNamed) {
  FakeTarget target(Fake());
  AuditorMetrics metrics;
  AcceptOptions o = Options(target.url() + "/v1", "v1");
  o.load = 1;
  const CampaignResult r = RunAccept(o, &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.target, target.url());
  EXPECT_EQ(r.details["tenants"],
            "3 keys checked; used: acme (sweeps), globex (load); not used: "
            "initech");
  EXPECT_EQ(r.tenants, (std::vector<std::string>{"acme", "globex", "initech"}));
}

TEST(AcceptTest, AKeyRefusedMidSweepIsInconclusiveNamingTheTenant) {
  FakeTargetOptions fo = Fake();
  fo.api_keys = {{"sk-a", "acme"}, {"sk-g", "globex"}, {"sk-i", "initech"}};
  fo.revoke_after_completions = 80;
  fo.revoked_key = "sk-a";
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunAccept(Options(target.url(), "revoked"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  EXPECT_NE(absl::StrJoin(r.reasons, "\n").find("tenant 'acme' was refused"),
            std::string::npos)
      << Explain(r);
}

TEST(AcceptTest, ATargetThatDiesMidSweepIsAnError) {
  FakeTargetOptions fo = Fake();
  fo.die_after_completions = 60;
  FakeTarget target(fo);
  AcceptOptions o = Options(target.url(), "dies");
  o.target.max_consecutive_failures = 3;
  AuditorMetrics metrics;
  const CampaignResult r = RunAccept(o, &metrics);
  ASSERT_EQ(r.verdict, Verdict::kError) << Explain(r);
  EXPECT_NE(r.reasons[0].find("target down"), std::string::npos);
}

// ---- A small scripted server: what the fakes do not do.

struct ScriptOptions {
  int limit = 80;            // advertised max_prompt_tokens
  int past_status = 400;     // the answer to a longer prompt
  bool echo = true;          // the prompt's last words, or fixed words
  bool random_text = false;  // a different answer every time
  bool advertise = true;     // false: /v1/models names no limit
  bool refuse = true;        // false: processes any length, whole
  int echo_status = 200;     // the answer to an echo prompt (ends " The")
  int echo_status_above_words = 0;  // ...of more words than this
  // With another request in flight, the first 10 words are dropped (the
  // count and answer say so); other keys than sk-a hold their request
  // 30 ms, so the sweep's probes under load overlap them.
  bool drop_head_under_load = false;
  // Tokens each pad candidate word counts: 2 leaves no one-token pad.
  int pad_word_tokens = 1;
};

// Counts a prompt as 1 + its whitespace-separated words; answers with the
// last 8 words of the prompt (echo) or "zig zag" words (and, dropping
// heads, the number of words processed).
class ScriptedTarget {
 public:
  explicit ScriptedTarget(ScriptOptions o) : o_(o) {
    server_.Get(
        "/v1/models", [this](const http::Request&, http::Response& res) {
          res.set_content(
              json({{"object", "list"},
                    {"data",
                     {o_.advertise ? json{{"id", "scripted"},
                                          {"max_prompt_tokens", o_.limit}}
                                   : json{{"id", "scripted"}}}}})
                  .dump(),
              "application/json");
        });
    server_.Post("/v1/completions", [this](const http::Request& req,
                                           http::Response& res) {
      const json body = json::parse(req.body);
      const std::string prompt = body["prompt"].get<std::string>();
      std::vector<std::string> words =
          absl::StrSplit(prompt, ' ', absl::SkipEmpty());
      const int others = in_flight_++;
      struct Leave {
        std::atomic<int>* n;
        ~Leave() { --*n; }
      } leave{&in_flight_};
      if (o_.drop_head_under_load &&
          req.get_header_value("Authorization") != "Bearer sk-a") {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
      }
      if (o_.drop_head_under_load && others > 0 && words.size() > 20) {
        words.erase(words.begin(), words.begin() + 10);
      }
      if (o_.echo_status != 200 && absl::EndsWith(prompt, " The") &&
          static_cast<int>(words.size()) > o_.echo_status_above_words) {
        res.status = o_.echo_status;
        res.set_content(R"({"error":{"message":"no"}})", "application/json");
        return;
      }
      int tokens = 1;
      for (const std::string& w : words) {
        const bool pad = std::any_of(
            PadCandidates().begin(), PadCandidates().end(),
            [&w](const std::string& p) { return p.substr(1) == w; });
        tokens += pad ? o_.pad_word_tokens : 1;
      }
      if (o_.refuse && tokens > o_.limit) {
        res.status = o_.past_status;
        res.set_content(R"({"error":{"message":"too long"}})",
                        "application/json");
        return;
      }
      std::string text = " zig zag";
      if (o_.echo) {
        text.clear();
        for (size_t i = words.size() > 8 ? words.size() - 8 : 0;
             i < words.size(); ++i) {
          text += " " + words[i];
        }
      }
      if (o_.random_text) text += absl::StrCat(" zz", calls_++);
      if (o_.drop_head_under_load) text += absl::StrCat(" n", words.size());
      json out = {
          {"id", "cmpl-1"},
          {"object", "text_completion"},
          {"choices", {{{"index", 0}, {"text", text}}}},
          {"usage", {{"prompt_tokens", tokens}, {"completion_tokens", 2}}}};
      res.set_content(out.dump(), "application/json");
    });
    port_ = server_.Bind("127.0.0.1", 0).value();
    server_.Start();
  }
  ~ScriptedTarget() { server_.Stop(); }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }

 private:
  const ScriptOptions o_;
  http::Server server_;
  int port_ = 0;
  std::atomic<int> calls_{0};
  std::atomic<int> in_flight_{0};
};

// The incident's engine with its watermark check on answers 502: the prompt
// was admitted past the limit and failed. Not a refusal.
TEST(AcceptTest, AServerErrorPastTheLimitIsNotARefusal) {
  ScriptOptions so;
  so.past_status = 502;
  ScriptedTarget target(so);
  AuditorMetrics metrics;
  const CampaignResult r = RunAccept(Options(target.url(), "5xx"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  const Check* c = FindCheck(r, "refusal", "length 81");
  ASSERT_NE(c, nullptr) << Explain(r);
  EXPECT_EQ(c->state, "failed");
  EXPECT_NE(c->message.find("a 5xx is not a refusal"), std::string::npos);
  EXPECT_GE(Count(r, "boundary_not_refused"), 2);
  EXPECT_EQ(Count(r, "boundary_accepted"), 0);
}

TEST(AcceptTest, AModelThatNeverEchoesReliesOnGolden) {
  ScriptOptions so;
  so.echo = false;
  ScriptedTarget target(so);
  AuditorMetrics metrics;
  const CampaignResult r = RunAccept(Options(target.url(), "noecho"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_NE(r.details["echo"].get<std::string>().find(
                "disabled: the model does not echo a nonce alone"),
            std::string::npos);
  EXPECT_NE(r.details["echo"].get<std::string>().find("relying on golden"),
            std::string::npos);
  EXPECT_EQ(FindCheck(r, "echo", "length 64, end")->state, "skipped");
  EXPECT_EQ(FindCheck(r, "golden", "length 64")->state, "passed");
}

TEST(AcceptTest, NothingEchoesAndGoldenVariesAloneIsInconclusive) {
  ScriptOptions so;
  so.echo = false;
  so.random_text = true;
  ScriptedTarget target(so);
  AuditorMetrics metrics;
  const CampaignResult r = RunAccept(Options(target.url(), "blind"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  EXPECT_NE(absl::StrJoin(r.reasons, "\n").find("nothing echoes"),
            std::string::npos)
      << Explain(r);
  EXPECT_TRUE(r.findings.empty());
}

TEST(AcceptTest, GoldenVaryingAloneIsNotAFindingWhenEchoCovers) {
  ScriptOptions so;
  so.random_text = true;
  ScriptedTarget target(so);
  AuditorMetrics metrics;
  const CampaignResult r = RunAccept(Options(target.url(), "echo"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_NE(r.details["golden"].get<std::string>().find("disabled"),
            std::string::npos);
}

// The incident's shape under concurrency: alone every prompt is processed
// whole, with others in flight its head is dropped. The check pass under
// load fails, naming the length.
TEST(AcceptTest, DroppingTheHeadUnderConcurrencyFailsUnderLoad) {
  ScriptOptions so;
  so.drop_head_under_load = true;
  ScriptedTarget target(so);
  AuditorMetrics metrics;
  AcceptOptions o = Options(target.url(), "drophead");
  o.load = 2;
  o.seed = 7;
  const CampaignResult r = RunAccept(o, &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(r.exit_code(), 1);
  bool named = false;
  for (const Check* c : Failed(r)) {
    named = named || ((c->check == "golden_under_load" || c->check == "echo") &&
                      absl::StartsWith(c->subject, "length "));
  }
  EXPECT_TRUE(named) << Explain(r);
  EXPECT_GT(Count(r, "accept_golden_mismatch"), 0) << Explain(r);
}

// Every echo prompt refused: that says nothing about the model, so echo
// is not "disabled, rely on golden" but a failed calibration.
TEST(AcceptTest, EchoPromptsRefusedIsInconclusiveNotRelyingOnGolden) {
  ScriptOptions so;
  so.echo_status = 400;
  ScriptedTarget target(so);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunAccept(Options(target.url(), "echo400"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  const std::string reasons = absl::StrJoin(r.reasons, "\n");
  EXPECT_NE(reasons.find("echo: "), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("HTTP 400"), std::string::npos) << reasons;
  EXPECT_EQ(r.details["echo"].get<std::string>().find("relying on golden"),
            std::string::npos);
}

// Echo calibrated on short prompts, then every longer echo prompt an
// error: those pairs are never judged, so no verdict of clean.
TEST(AcceptTest, EchoErrorsAtTheSweptLengthsAreInconclusive) {
  ScriptOptions so;
  so.echo_status = 502;
  so.echo_status_above_words = 55;
  ScriptedTarget target(so);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunAccept(Options(target.url(), "echo502"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  EXPECT_NE(absl::StrJoin(r.reasons, "\n").find("ended in error"),
            std::string::npos)
      << Explain(r);
}

// No limit advertised and none enforced: nothing to sweep past, so no
// verdict of clean.
TEST(AcceptTest, NeverAdvertisingAndNeverRefusingIsNotClean) {
  ScriptOptions so;
  so.advertise = false;
  so.refuse = false;
  ScriptedTarget target(so);
  AuditorMetrics metrics;
  AcceptOptions o = Options(target.url(), "nolimit");
  o.max_ladder_tokens = 256;
  o.page_tokens = 64;
  const CampaignResult r = RunAccept(o, &metrics);
  EXPECT_NE(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_NE(absl::StrJoin(r.reasons, "\n").find("boundary: "),
            std::string::npos)
      << Explain(r);
}

TEST(AcceptTest, OneRepeatIsRefusedAsAnError) {
  AcceptOptions o = Options("http://127.0.0.1:1", "repeats");
  o.repeats = 1;
  AuditorMetrics metrics;
  const CampaignResult r = RunAccept(o, &metrics);
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_NE(r.reasons[0].find("--repeats=1 must be >= 2"), std::string::npos);
}

TEST(AcceptTest, APlanOverTheLengthCapIsInconclusiveNamingTheCap) {
  FakeTarget target(Fake());
  AuditorMetrics metrics;
  AcceptOptions o = Options(target.url(), "cap");
  o.max_lengths = 5;
  const CampaignResult r = RunAccept(o, &metrics);
  ASSERT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  EXPECT_NE(absl::StrJoin(r.reasons, "\n").find("over --max-lengths=5"),
            std::string::npos)
      << Explain(r);
  EXPECT_GT(r.details["sweep"]["planned_requests"].get<int>(), 0);
}

// Without a one-token pad several planned lengths send the same prompts:
// swept once, named by the length sent, and boundaries ±1 are reported as
// not reachable.
TEST(AcceptTest, WithoutAOneTokenPadChecksNameTheLengthSent) {
  ScriptOptions so;
  so.pad_word_tokens = 2;
  ScriptedTarget target(so);
  AuditorMetrics metrics;
  const CampaignResult r = RunAccept(Options(target.url(), "nopad"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  EXPECT_NE(
      absl::StrJoin(r.reasons, "\n").find("page boundaries ±1 not reachable"),
      std::string::npos)
      << Explain(r);
  const int unit = r.details["sweep"]["filler"]["unit_tokens"].get<int>();
  ASSERT_GT(unit, 1);
  std::set<std::string> subjects;
  std::set<int> sent;
  for (const Check& c : r.checks) {
    EXPECT_TRUE(subjects.insert(c.check + " " + c.subject).second)
        << c.check << " " << c.subject;
    if (c.check == "prompt_tokens" && c.state == "passed") {
      sent.insert(std::stoi(c.subject.substr(7)));
    }
  }
  // Each length named is one a count prompt was sent at: base + k units.
  const int base = r.details["sweep"]["filler"]["bases"]["count"].get<int>();
  for (int n : sent) EXPECT_EQ((n - base) % unit, 0) << n;
  bool merged = false;
  for (const json& l : r.details["sweep"]["per_length"]) {
    merged = merged || !l["merged"].empty();
  }
  EXPECT_TRUE(merged);
}

}  // namespace
}  // namespace kvcanary::auditor
