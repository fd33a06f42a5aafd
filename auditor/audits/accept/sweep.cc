#include "auditor/audits/accept/sweep.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <set>

#include "absl/strings/str_cat.h"
#include "auditor/detectors/boundary.h"
#include "auditor/detectors/echo.h"
#include "auditor/detectors/golden.h"
#include "auditor/target/completion.h"
#include "auditor/target/multi_client.h"
#include "common/clock.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A 4xx that says something other than "too long": the key, the rate, a
// timeout. Neither a refusal of the length nor an answer.
bool OtherClientError(int status) {
  return status == 401 || status == 403 || status == 408 || status == 429;
}

// A server's own text, cut to fit in a check message.
std::string Short(absl::string_view text) {
  constexpr size_t kMax = 120;
  if (text.size() <= kMax) return std::string(text);
  return absl::StrCat(text.substr(0, kMax), "...");
}

}  // namespace

const char* AcceptPhaseName(AcceptPhase p) {
  switch (p) {
    case AcceptPhase::kAlone:
      return "alone";
    case AcceptPhase::kCheck:
      return "check";
    case AcceptPhase::kUnderLoad:
      return "under_load";
    case AcceptPhase::kPast:
      return "past_limit";
    case AcceptPhase::kConfirm:
      return "confirm_alone";
  }
  return "alone";
}

std::string UnusableWhy(const Completion& c) {
  if (c.status == 0) {
    return absl::StrCat("no HTTP answer (", Short(c.error.message()), ")");
  }
  if (c.status == 200 && !c.http_ok_error) {
    return absl::StrCat("HTTP 200 without a completion (",
                        Short(c.error.message()), ")");
  }
  return absl::StrCat("HTTP ", c.status,
                      c.http_ok_error ? " (an error inside HTTP 200)" : "");
}

AcceptSweep::AcceptSweep(const AcceptOptions& options,
                         const AcceptCalibration& cal, Target* session,
                         EvidenceLog* log, AuditorMetrics* metrics)
    : o_(options),
      cal_(cal),
      session_(session),
      log_(log),
      metrics_(metrics),
      rng_(options.seed != 0 ? options.seed : std::random_device{}()),
      last_progress_(Clock::now()) {}

void AcceptSweep::Progress() {
  if (!o_.progress || Clock::now() - last_progress_ < std::chrono::seconds(2)) {
    return;
  }
  last_progress_ = Clock::now();
  std::fprintf(stderr,
               "[kvcanary-auditor] accept running: %lld requests, %zu "
               "findings\n",
               static_cast<long long>(t_.requests), t_.findings.size());
}

void AcceptSweep::Plan() {
  const FillerModel& m = cal_.filler;
  const int tol = m.tolerance;
  // Within the limit even if a prefix counts `tol` more; past it even if
  // it counts `tol` fewer.
  if (cal_.limit.prompt_tokens > 0) {
    t_.within_max = cal_.limit.prompt_tokens - tol;
    t_.refuse_above = cal_.limit.refuse_above;
  } else if (cal_.ladder.has_value()) {
    t_.within_max = cal_.ladder->limit - tol;  // what came back whole
  }
  auto shortest = m.base.find(PromptKind::kCount);
  if (shortest == m.base.end()) return;  // no counts: nothing to plan
  for (SweepLength& s :
       PlanLengths(o_.page_tokens, shortest->second, t_.within_max,
                   t_.refuse_above > 0 ? t_.refuse_above + tol : 0,
                   o_.max_ladder_tokens)) {
    LengthState l;
    l.length = std::move(s);
    for (PromptKind kind : kAllPromptKinds) {
      if (l.length.past && kind != PromptKind::kCount) continue;
      auto f = FillFor(m, kind, l.length.tokens, l.length.past);
      if (f.has_value()) l.fills[kind] = *f;
    }
    // Without a one-token pad several planned lengths can send the same
    // prompts: sweep them once.
    if (!t_.lengths.empty() && SameFills(t_.lengths.back(), l)) {
      LengthState& kept = t_.lengths.back();
      kept.merged.push_back(l.length.tokens);
      for (const std::string& why : l.length.why) {
        if (std::find(kept.length.why.begin(), kept.length.why.end(), why) ==
            kept.length.why.end()) {
          kept.length.why.push_back(why);
        }
      }
      continue;
    }
    t_.lengths.push_back(std::move(l));
  }
  CountPlanned();
}

// Each length within: a count probe, golden and echo per position
// `repeats` times alone, then the check pass (echo per position once,
// golden `repeats` times with --load); past it, plain and streamed; one
// streamed control.
void AcceptSweep::CountPlanned() {
  t_.planned_lengths = static_cast<int>(t_.lengths.size());
  const int64_t k = o_.repeats;
  for (const LengthState& l : t_.lengths) {
    if (l.length.past) {
      t_.planned_requests += 2;
      continue;
    }
    t_.planned_requests += 1 + k + 3 * k + 3 + (o_.load > 0 ? k : 0);
  }
  if (t_.refuse_above > 0) ++t_.planned_requests;
  if (t_.planned_lengths > o_.max_lengths) {
    t_.over_cap = absl::StrCat(
        "the plan has ", t_.planned_lengths, " lengths (up to ",
        t_.planned_requests, " requests), over --max-lengths=", o_.max_lengths,
        ": nothing was swept (raise --max-lengths or --page-tokens)");
  }
}

AcceptProbe AcceptSweep::MakeProbe(size_t length, PromptKind kind,
                                   AcceptPhase phase,
                                   const std::string& prefix) {
  AcceptProbe p;
  p.id = next_probe_++;
  p.length = length;
  p.kind = kind;
  p.phase = phase;
  p.prompt =
      BuildAcceptPrompt(kind, prefix.empty() ? buster_.Next() : prefix,
                        t_.lengths[length].fills.at(kind), cal_.filler.pad,
                        cal_.nonce.has_value() ? &*cal_.nonce : nullptr);
  return p;
}

Completion AcceptSweep::SendAlone(const AcceptProbe& p) {
  return session_->SendAlone(sweeper(), p.prompt, kBoundaryMaxTokens, p.stream);
}

absl::Status AcceptSweep::Run() {
  if (!t_.over_cap.empty()) return absl::OkStatus();
  if (o_.progress) {
    std::fprintf(stderr,
                 "[kvcanary-auditor] accept plan: %d lengths, up to %lld "
                 "requests\n",
                 t_.planned_lengths,
                 static_cast<long long>(t_.planned_requests));
  }
  for (size_t i = 0; i < t_.lengths.size(); ++i) {
    if (t_.lengths[i].length.past) continue;
    RETURN_IF_ERROR(SweepWithin(i));
  }
  RETURN_IF_ERROR(StreamControl());
  RETURN_IF_ERROR(PastLimit());
  RETURN_IF_ERROR(CheckPass());
  RETURN_IF_ERROR(ConfirmEchoMisses());
  return log_ == nullptr ? absl::OkStatus() : log_->Flush();
}

// Alone at one length: the count probe, golden `repeats` times, echo
// `repeats` times per position (the pair's calibration).
absl::Status AcceptSweep::SweepWithin(size_t i) {
  LengthState& l = t_.lengths[i];
  if (l.fills.count(PromptKind::kCount)) {
    const AcceptProbe p = MakeProbe(i, PromptKind::kCount, AcceptPhase::kAlone);
    const Completion c = SendAlone(p);
    RETURN_IF_ERROR(session_->down());
    if (!c.usable) {
      l.prompt_tokens.Note(CheckState::kError,
                           absl::StrCat(UnusableWhy(c), " within the limit"));
    }
    RETURN_IF_ERROR(Observe(p, c));
  }
  RETURN_IF_ERROR(GoldenAlone(i));
  for (PromptKind position : kEchoPositions) {
    RETURN_IF_ERROR(EchoAlone(i, position));
  }
  return absl::OkStatus();
}

absl::Status AcceptSweep::GoldenAlone(size_t i) {
  LengthState& l = t_.lengths[i];
  if (!cal_.golden_deterministic) {
    l.golden.Note(CheckState::kSkipped,
                  cal_.golden_failure.empty()
                      ? absl::StrCat("golden disabled: ", cal_.golden_disabled)
                      : absl::StrCat("golden failed: ", cal_.golden_failure));
    return absl::OkStatus();
  }
  if (!l.fills.count(PromptKind::kGolden)) {
    l.golden.Note(CheckState::kSkipped,
                  absl::StrCat("the golden prompt is longer than ",
                               l.length.tokens, " tokens"));
    return absl::OkStatus();
  }
  // One prompt per length, `repeats` times: the same answer is expected.
  l.golden_prefix = buster_.Next();
  std::vector<std::string> answers;
  std::vector<AcceptProbe> probes;
  std::vector<Completion> completions;
  for (int k = 0; k < o_.repeats; ++k) {
    const AcceptProbe p =
        MakeProbe(i, PromptKind::kGolden, AcceptPhase::kAlone, l.golden_prefix);
    const Completion c = SendAlone(p);
    RETURN_IF_ERROR(session_->down());
    RETURN_IF_ERROR(Observe(p, c));
    if (!c.usable) {
      l.golden.Note(CheckState::kError,
                    absl::StrCat(UnusableWhy(c), " alone, within the limit"));
      return absl::OkStatus();
    }
    probes.push_back(p);
    completions.push_back(c);
  }
  const std::string& first = completions[0].text;
  for (size_t k = 1; k < completions.size(); ++k) {
    auto g = CompareGolden(0, first, completions[k].text, sweeper().name);
    if (!g.has_value()) continue;
    l.golden.Note(
        CheckState::kFailed,
        absl::StrCat("run ", k + 1, " of ", o_.repeats,
                     " alone gave another answer to the same prompt "
                     "than run 1 (at the shortest length every run gave one "
                     "answer)"));
    g->kind = "accept_golden_mismatch";
    g->group = {{"template", "accept_alone"}};
    RETURN_IF_ERROR(AddFindings(probes[k], completions[k], {*std::move(g)}));
  }
  if (l.golden.noted) return absl::OkStatus();
  l.golden_answer = first;
  l.golden.Note(CheckState::kPassed,
                absl::StrCat("one answer in ", o_.repeats, " runs alone"));
  return absl::OkStatus();
}

absl::Status AcceptSweep::EchoAlone(size_t i, PromptKind position) {
  LengthState& l = t_.lengths[i];
  CheckNote& n = l.echo[position];
  if (!cal_.nonce.has_value()) {
    n.Note(CheckState::kSkipped,
           absl::StrCat("echo disabled: ",
                        cal_.echo_disabled.empty() ? cal_.echo_failure
                                                   : cal_.echo_disabled,
                        "; relying on golden"));
    return absl::OkStatus();
  }
  if (!l.fills.count(position)) {
    n.Note(CheckState::kSkipped,
           cal_.filler.base.count(position)
               ? absl::StrCat("the echo prompt is longer than ",
                              l.length.tokens, " tokens")
               : "this position's prompt did not count linearly");
    return absl::OkStatus();
  }
  int& runs = l.echo_runs[position];
  int& echoed = l.echo_echoed[position];
  for (int k = 0; k < o_.repeats; ++k) {
    const AcceptProbe p = MakeProbe(i, position, AcceptPhase::kAlone);
    const Completion c = SendAlone(p);
    RETURN_IF_ERROR(session_->down());
    RETURN_IF_ERROR(Observe(p, c));
    if (!c.usable) {
      n.Note(CheckState::kError,
             absl::StrCat(UnusableWhy(c), " alone, within the limit"));
      return absl::OkStatus();
    }
    ++runs;
    if (!CheckEcho(*cal_.nonce, c.text, sweeper().name).has_value()) ++echoed;
  }
  l.echo_covered[position] = echoed == o_.repeats;
  if (echoed < o_.repeats) {
    n.Note(CheckState::kSkipped, absl::StrCat("not covered: echoed ", echoed,
                                              " of ", o_.repeats, " alone"));
  }
  return absl::OkStatus();
}

// The positive control of streamed refusals: a streamed count probe at
// the longest length within the limit must be answered, or a streamed
// "refusal" past it may be a target that refuses every stream.
absl::Status AcceptSweep::StreamControl() {
  if (t_.refuse_above == 0) return absl::OkStatus();
  size_t at = t_.lengths.size();
  for (size_t i = 0; i < t_.lengths.size(); ++i) {
    if (!t_.lengths[i].length.past &&
        t_.lengths[i].fills.count(PromptKind::kCount)) {
      at = i;
    }
  }
  if (at == t_.lengths.size()) {
    t_.stream_control = "no length within the limit to stream";
    return absl::OkStatus();
  }
  AcceptProbe p = MakeProbe(at, PromptKind::kCount, AcceptPhase::kAlone);
  p.stream = true;
  const Completion c = SendAlone(p);
  RETURN_IF_ERROR(session_->down());
  t_.stream_control_usable = c.usable;
  t_.stream_control =
      absl::StrCat("a streamed prompt of ",
                   t_.lengths[at].fills.at(PromptKind::kCount).predicted,
                   " tokens (within the limit) got ",
                   c.usable ? std::string("an answer") : UnusableWhy(c));
  if (!c.usable) {
    t_.lengths[at].prompt_tokens.Note(CheckState::kError,
                                      absl::StrCat(UnusableWhy(c),
                                                   " streamed, within "
                                                   "the limit"));
  }
  return Observe(p, c);
}

// Past the limit: each length plain and streamed, alone, so both ways of
// refusing (a status, an error inside a 200 stream) are seen.
absl::Status AcceptSweep::PastLimit() {
  for (size_t i = 0; i < t_.lengths.size(); ++i) {
    if (!t_.lengths[i].length.past) continue;
    if (!t_.lengths[i].fills.count(PromptKind::kCount)) continue;
    for (bool stream : {false, true}) {
      AcceptProbe p = MakeProbe(i, PromptKind::kCount, AcceptPhase::kPast);
      p.stream = stream;
      const Completion c = SendAlone(p);
      RETURN_IF_ERROR(session_->down());
      RETURN_IF_ERROR(Observe(p, c));
      if (stream && !t_.stream_control_usable && c.status >= 400 &&
          c.status < 500 && !OtherClientError(c.status)) {
        t_.lengths[i].refusal.Note(
            CheckState::kError,
            absl::StrCat("streamed refusal not trusted: ", t_.stream_control));
      }
    }
  }
  return absl::OkStatus();
}

// Each covered echo pair once more, and with --load golden `repeats` times
// per length, under load.
absl::Status AcceptSweep::CheckPass() {
  const AcceptPhase phase =
      o_.load > 0 ? AcceptPhase::kUnderLoad : AcceptPhase::kCheck;
  std::vector<AcceptProbe> probes;
  for (size_t i = 0; i < t_.lengths.size(); ++i) {
    LengthState& l = t_.lengths[i];
    for (const auto& [position, covered] : l.echo_covered) {
      if (covered) probes.push_back(MakeProbe(i, position, phase));
    }
    if (o_.load == 0 || l.length.past) continue;
    if (!l.golden_answer.has_value()) {
      l.golden_under_load.Note(
          CheckState::kSkipped,
          absl::StrCat("no answer recorded alone: ", l.golden.message));
      continue;
    }
    for (int k = 0; k < o_.repeats; ++k) {
      probes.push_back(
          MakeProbe(i, PromptKind::kGolden, phase, l.golden_prefix));
    }
  }
  if (o_.load > 0) return RunUnderLoad(std::move(probes));
  for (const AcceptProbe& p : probes) {
    const Completion c = SendAlone(p);
    RETURN_IF_ERROR(session_->down());
    RETURN_IF_ERROR(Observe(p, c));
  }
  return absl::OkStatus();
}

absl::Status AcceptSweep::ConfirmEchoMisses() {
  std::vector<EchoMiss> misses = std::move(echo_misses_);
  const std::string where = o_.load > 0 ? "under load" : "in the check pass";
  for (EchoMiss& m : misses) {
    AcceptProbe p = m.probe;
    p.id = next_probe_++;
    p.phase = AcceptPhase::kConfirm;
    const Completion c = SendAlone(p);
    RETURN_IF_ERROR(session_->down());
    RETURN_IF_ERROR(Observe(p, c));
    CheckNote& n = t_.lengths[p.length].echo[p.kind];
    if (!c.usable) {
      n.Note(CheckState::kError,
             absl::StrCat("the nonce did not come back ", where,
                          "; sent "
                          "again alone: ",
                          UnusableWhy(c)));
      continue;
    }
    if (CheckEcho(*cal_.nonce, c.text, sweeper().name).has_value()) {
      t_.lengths[p.length].echo_covered[p.kind] = false;
      n.Note(CheckState::kSkipped,
             absl::StrCat("not covered: the nonce did not come back ", where,
                          ", nor when the same prompt was sent again alone "
                          "(this prompt's own prefix, not the target)"));
      continue;
    }
    n.Note(CheckState::kFailed,
           absl::StrCat("the nonce did not come back ", where,
                        ", yet did when the same prompt was sent again alone "
                        "(and ",
                        o_.repeats, " of ", o_.repeats,
                        " times in calibration): its part of the prompt was "
                        "not read"));
    Finding f = std::move(m.finding);
    f.kind = "accept_echo_missing";
    f.group = {{"template", "accept"}, {"position", PromptKindName(p.kind)}};
    f.detail["confirmed_alone_by_probe"] = p.id;
    RETURN_IF_ERROR(AddFindings(m.probe, m.answer, {std::move(f)}));
  }
  return absl::OkStatus();
}

ProbeRequest AcceptSweep::LoadRequest(uint64_t id, int tenant) {
  // Long prompts of the load tenant's own, filling many pages with its
  // data: a quarter of the longest to the longest within the limit.
  const auto base = cal_.filler.base.find(PromptKind::kCount);
  const int most =
      std::max(1, (t_.within_max - base->second) / cal_.filler.unit_tokens);
  std::uniform_int_distribution<int> units(std::max(1, most / 4), most);
  return session_->Request(id, session_->options().tenants[tenant],
                           BoundaryPrompt(buster_.Next(), units(rng_)),
                           kBoundaryMaxTokens, false);
}

absl::Status AcceptSweep::ObserveLoad(int tenant, const Completion& c) {
  const std::string outcome = Outcome(c);
  ++t_.load_sent;
  ++t_.load_status[c.status];
  if (c.usable) ++t_.load_usable;
  metrics_->CountProbe("accept_load", outcome);
  const std::string& name = session_->options().tenants[tenant].name;
  if (c.status == 401 || c.status == 403) ++t_.refused[name];
  return Record("probe", {{"kind", "accept_load"},
                          {"phase", "under_load"},
                          {"tenant", name},
                          {"outcome", outcome},
                          {"http_status", c.status},
                          {"ms", c.total_ms},
                          {"response_id", c.response_id},
                          {"engine_request", c.engine_request}});
}

// The sweep's probes on a few slots, the load tenants on the rest; the
// sweep's start waits until the load fills its slots, and the load stops
// with the sweep.
absl::Status AcceptSweep::RunUnderLoad(std::vector<AcceptProbe> probes) {
  std::deque<AcceptProbe> queue(std::make_move_iterator(probes.begin()),
                                std::make_move_iterator(probes.end()));
  const int sweep_slots = std::max(1, o_.concurrency / (o_.load + 1));
  const int load_slots = std::max(1, o_.concurrency - sweep_slots);
  std::map<uint64_t, AcceptProbe> sweep_in_flight;
  std::map<uint64_t, int> load_in_flight;  // id -> tenant
  uint64_t next_id = 0;
  int64_t load_started = 0;
  absl::Status error;
  auto done = [&] {
    return !error.ok() || !session_->down().ok() ||
           (queue.empty() && sweep_in_flight.empty());
  };
  MultiClient client(sweep_slots + load_slots);
  client.Run(
      [&]() -> std::optional<ProbeRequest> {
        if (done()) return std::nullopt;
        const uint64_t id = next_id++;
        if (!queue.empty() &&
            static_cast<int>(sweep_in_flight.size()) < sweep_slots &&
            load_started >= load_slots) {
          AcceptProbe p = std::move(queue.front());
          queue.pop_front();
          ProbeRequest r = session_->Request(id, sweeper(), p.prompt,
                                             kBoundaryMaxTokens, p.stream);
          sweep_in_flight[id] = std::move(p);
          return r;
        }
        if (static_cast<int>(load_in_flight.size()) >= load_slots) {
          return std::nullopt;
        }
        const int tenant = 1 + static_cast<int>(load_started++ % o_.load);
        load_in_flight[id] = tenant;
        return LoadRequest(id, tenant);
      },
      [&](ProbeResponse resp) {
        auto s = sweep_in_flight.find(resp.id);
        if (s != sweep_in_flight.end()) {
          const AcceptProbe p = std::move(s->second);
          sweep_in_flight.erase(s);
          const Completion c = ParseCompletion(resp, p.stream);
          session_->NoteTransport(c);
          absl::Status st = Observe(p, c);
          if (!st.ok() && error.ok()) error = st;
          return;
        }
        const int tenant = load_in_flight[resp.id];
        load_in_flight.erase(resp.id);
        const Completion c = ParseCompletion(resp, false);
        session_->NoteTransport(c);
        absl::Status st = ObserveLoad(tenant, c);
        if (!st.ok() && error.ok()) error = st;
      },
      done);
  RETURN_IF_ERROR(error);
  return session_->down();
}

absl::Status AcceptSweep::Observe(const AcceptProbe& p, const Completion& c) {
  const std::string kind = absl::StrCat("accept_", PromptKindName(p.kind));
  const std::string outcome = Outcome(c);
  const LengthState& l = t_.lengths[p.length];
  ++t_.requests;
  ++t_.by_kind[kind];
  ++t_.by_outcome[outcome];
  if (c.usable) ++t_.usable;
  metrics_->CountProbe(kind, outcome);
  if (c.status == 401 || c.status == 403) ++t_.refused[sweeper().name];
  json row = {{"probe", p.id},
              {"kind", kind},
              {"phase", AcceptPhaseName(p.phase)},
              {"length", l.length.tokens},
              {"predicted", l.fills.at(p.kind).predicted},
              {"tenant", sweeper().name},
              {"outcome", outcome},
              {"http_status", c.status},
              {"error_in_200", c.http_ok_error},
              {"stream", p.stream},
              {"ms", c.total_ms},
              {"prompt_sha256", Sha256Hex(p.prompt)},
              {"response_id", c.response_id},
              {"engine_request", c.engine_request}};
  if (c.usable) {
    row["output_sha256"] = Sha256Hex(c.text);
    row["prompt_tokens"] = c.prompt_tokens;
    row["cached_tokens"] = c.cached_tokens;
  }
  RETURN_IF_ERROR(Record("probe", std::move(row)));
  std::vector<Finding> found;
  if (p.phase == AcceptPhase::kPast) {
    JudgeRefusal(p, c, &found);
  } else if (c.usable) {
    JudgeCount(p, c, &found);
  }
  if (p.phase == AcceptPhase::kCheck || p.phase == AcceptPhase::kUnderLoad) {
    JudgeCheckPass(p, c, &found);
  }
  Progress();
  return AddFindings(p, c, std::move(found));
}

void AcceptSweep::JudgeCount(const AcceptProbe& p, const Completion& c,
                             std::vector<Finding>* found) {
  LengthState& l = t_.lengths[p.length];
  const int predicted = l.fills.at(p.kind).predicted;
  if (c.prompt_tokens < 0) {
    l.prompt_tokens.Note(CheckState::kError,
                         "HTTP 200 without usage.prompt_tokens");
    return;
  }
  ++l.counted;
  BoundaryObservation o{
      predicted,      0,       200, c.prompt_tokens, cal_.filler.tolerance,
      sweeper().name, "accept"};
  std::vector<Finding> counts = JudgeBoundary(o);
  if (counts.empty()) {
    ++l.counted_ok;
    l.prompt_tokens.Note(CheckState::kPassed, "");
    return;
  }
  l.prompt_tokens.Note(
      CheckState::kFailed,
      absl::StrCat("usage.prompt_tokens ", c.prompt_tokens, ", predicted ",
                   predicted, " ± ", cal_.filler.tolerance, " (",
                   PromptKindName(p.kind), " prompt, ",
                   AcceptPhaseName(p.phase), "): ",
                   counts[0].kind == "prompt_truncated"
                       ? "part of the prompt was not processed"
                       : "the prompt was not processed as sent"));
  for (Finding& f : counts) found->push_back(std::move(f));
}

void AcceptSweep::JudgePastLimitAnswer(const AcceptProbe& p,
                                       const Completion& c,
                                       std::vector<Finding>* found) {
  LengthState& l = t_.lengths[p.length];
  const int predicted = l.fills.at(p.kind).predicted;
  const std::string how = p.stream ? "streamed" : "plain";
  // Processed, not refused: a finding whatever the count says.
  BoundaryObservation o{
      predicted,          t_.refuse_above,       200,
      c.prompt_tokens,    cal_.filler.tolerance, sweeper().name,
      "accept_past_limit"};
  std::vector<Finding> b = JudgeBoundary(o);
  l.refusal.Note(
      CheckState::kFailed,
      absl::StrCat("HTTP 200 (", how, ") for a prompt of ", predicted,
                   " tokens past the limit of ", t_.refuse_above,
                   ": not refused, so not processed as sent "
                   "(usage.prompt_tokens ",
                   c.prompt_tokens, ")"));
  if (c.prompt_tokens >= 0) {
    ++l.counted;
    const bool cut = std::any_of(b.begin(), b.end(), [](const Finding& f) {
      return f.kind != "boundary_accepted";
    });
    if (cut) {
      l.prompt_tokens.Note(CheckState::kFailed,
                           absl::StrCat("usage.prompt_tokens ", c.prompt_tokens,
                                        " for a prompt of ", predicted, " ± ",
                                        cal_.filler.tolerance,
                                        " tokens: not the prompt as sent"));
    } else {
      ++l.counted_ok;
      l.prompt_tokens.Note(CheckState::kPassed, "");
    }
  }
  for (Finding& f : b) found->push_back(std::move(f));
}

void AcceptSweep::JudgeRefusal(const AcceptProbe& p, const Completion& c,
                               std::vector<Finding>* found) {
  if (c.usable) {
    JudgePastLimitAnswer(p, c, found);
    return;
  }
  LengthState& l = t_.lengths[p.length];
  const int predicted = l.fills.at(p.kind).predicted;
  const std::string how = p.stream ? "streamed" : "plain";
  const int s = c.status;
  if (s == 200 && !c.http_ok_error) {
    // Admitted, whatever the body: a refusal is a 4xx.
    l.refusal.Note(CheckState::kFailed,
                   absl::StrCat(UnusableWhy(c), " (", how, ") for a prompt of ",
                                predicted, " tokens past the limit of ",
                                t_.refuse_above, ": admitted, not refused"));
    BoundaryObservation o{
        predicted,      t_.refuse_above,    200, -1, cal_.filler.tolerance,
        sweeper().name, "accept_past_limit"};
    for (Finding& f : JudgeBoundary(o)) found->push_back(std::move(f));
    return;
  }
  if (s == 0 || OtherClientError(s)) {
    l.refusal.Note(CheckState::kError,
                   absl::StrCat(UnusableWhy(c), " (", how,
                                "): neither a refusal of the length nor an "
                                "answer"));
    return;
  }
  if (s >= 400 && s < 500) {
    l.refusal.Note(CheckState::kPassed,
                   absl::StrCat("refused: HTTP ", s, " (", how, ")"));
    return;
  }
  // A 5xx is not a refusal: the target admitted the prompt and failed on it.
  l.refusal.Note(
      CheckState::kFailed,
      absl::StrCat(UnusableWhy(c), " (", how, ") for a prompt of ", predicted,
                   " tokens past the limit of ", t_.refuse_above,
                   ": a 5xx is not a refusal (the prompt was admitted and "
                   "failed); a 4xx is required"));
  Finding f;
  f.detector = "boundary";
  f.kind = "boundary_not_refused";
  f.severity = Severity::kMedium;
  f.reader = sweeper().name;
  f.group = {{"template", "accept_past_limit"}};
  f.detail = {{"tenant", sweeper().name},
              {"predicted_prompt_tokens", predicted},
              {"limit", t_.refuse_above},
              {"http_status", s},
              {"error_in_200", c.http_ok_error}};
  found->push_back(std::move(f));
}

void AcceptSweep::JudgeCheckPass(const AcceptProbe& p, const Completion& c,
                                 std::vector<Finding>* found) {
  LengthState& l = t_.lengths[p.length];
  const bool load = p.phase == AcceptPhase::kUnderLoad;
  const std::string where =
      load ? absl::StrCat("under load of ", o_.load, " tenants")
           : "alone, after its calibration";
  if (IsEcho(p.kind)) {
    CheckNote& n = l.echo[p.kind];
    if (!c.usable) {
      n.Note(CheckState::kError, absl::StrCat(UnusableWhy(c), " ", where));
      return;
    }
    auto e = CheckEcho(*cal_.nonce, c.text, sweeper().name);
    if (!e.has_value()) {
      n.Note(CheckState::kPassed,
             absl::StrCat("echoed ", o_.repeats, " of ", o_.repeats,
                          " alone, and ", where));
      return;
    }
    echo_misses_.push_back({p, *std::move(e), c});  // judged when sent alone
    return;
  }
  if (p.kind != PromptKind::kGolden) return;
  CheckNote& n = l.golden_under_load;
  if (!c.usable) {
    n.Note(CheckState::kError, absl::StrCat(UnusableWhy(c), " ", where));
    return;
  }
  ++t_.golden_load_answers;
  if (c.cached_tokens > 0) ++t_.golden_load_cached;
  if (c.cached_tokens < 0) ++t_.golden_load_unknown;
  auto g = CompareGolden(0, *l.golden_answer, c.text, sweeper().name);
  if (!g.has_value()) {
    n.Note(CheckState::kPassed,
           absl::StrCat("the answer recorded alone, ", where,
                        c.cached_tokens > 0
                            ? absl::StrCat(" (", c.cached_tokens,
                                           " prompt tokens from the cache)")
                            : std::string()));
    return;
  }
  n.Note(CheckState::kFailed,
         absl::StrCat(where,
                      " the answer differs from the one recorded alone "
                      "at this length"));
  g->kind = "accept_golden_mismatch";
  g->group = {{"template", "accept_under_load"}};
  found->push_back(*std::move(g));
}

absl::Status AcceptSweep::AddFindings(const AcceptProbe& p, const Completion& c,
                                      std::vector<Finding> found) {
  for (Finding& f : found) {
    f.ts_us = NowUs();
    f.probe = p.id;
    f.engine_request = c.engine_request;
    f.detail["probe"] = p.id;
    f.detail["length"] = t_.lengths[p.length].length.tokens;
    f.detail["prompt_kind"] = PromptKindName(p.kind);
    f.detail["phase"] = AcceptPhaseName(p.phase);
    metrics_->CountFinding(f.kind, SeverityName(f.severity));
    json body = f.ToJson();
    t_.findings.push_back(std::move(f));
    RETURN_IF_ERROR(Record("finding", std::move(body), /*flush=*/true));
  }
  return absl::OkStatus();
}

}  // namespace kvcanary::auditor
