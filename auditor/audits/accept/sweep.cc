// The acceptance sweep's plan and its run (AcceptSweep, sweep.h): the
// lengths planned from the calibration, the requests they cost, and the
// pass alone within the limit (the count probe, golden and echo per
// length). The other passes: sweep_past_limit.cc, sweep_check_pass.cc;
// every answer is recorded and counted in sweep_observe.cc.
#include "auditor/audits/accept/sweep.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "auditor/detectors/echo.h"
#include "auditor/detectors/golden.h"
#include "common/status_macros.h"

namespace kvcanary::auditor {
namespace {

using Clock = std::chrono::steady_clock;

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
}  // namespace kvcanary::auditor
