// The check pass (AcceptSweep, sweep.h): each covered echo position once
// more, alone or, with --load, beside load tenants' long prompts with
// golden resent under that load; echo misses sent again alone to confirm
// them, and each answer judged against what came back alone.
#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "auditor/audits/accept/sweep.h"
#include "auditor/detectors/echo.h"
#include "auditor/detectors/golden.h"
#include "auditor/target/completion.h"
#include "auditor/target/multi_client.h"
#include "common/status_macros.h"

namespace kvcanary::auditor {
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
          const Completion c = session_->Parse(resp, p.stream);
          session_->Note(sweeper(), c);
          absl::Status st = Observe(p, c);
          if (!st.ok() && error.ok()) error = st;
          return;
        }
        const int tenant = load_in_flight[resp.id];
        load_in_flight.erase(resp.id);
        const Completion c = session_->Parse(resp, false);
        session_->Note(session_->options().tenants[tenant], c);
        absl::Status st = ObserveLoad(tenant, c);
        if (!st.ok() && error.ok()) error = st;
      },
      done);
  RETURN_IF_ERROR(error);
  return session_->down();
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
}  // namespace kvcanary::auditor
