#include "auditor/audits/accept/calibration.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "auditor/audits/accept/sweep.h"
#include "auditor/detectors/boundary.h"
#include "auditor/detectors/echo.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;

// Tokens a calibration answer generates: its count is what is measured.
constexpr int kCountMaxTokens = 1;

class AcceptCalibrator {
 public:
  AcceptCalibrator(const AcceptCalibrationOptions& o, const SendAlone& send)
      : o_(o), send_(send) {}

  AcceptCalibration Run() {
    Units();
    Echo();
    if (c_.counts_failure.empty()) {
      Kinds();
      Pad();
    }
    Limit();
    Golden();
    return std::move(c_);
  }

 private:
  Completion Send(const std::string& prompt, int max_tokens,
                  bool stream = false) {
    ++c_.requests;
    return send_(o_.tenant, prompt, max_tokens, stream);
  }
  // usage.prompt_tokens of `prompt` alone; -1 if not answered with one.
  int Count(const std::string& prompt) {
    const Completion c = Send(prompt, kCountMaxTokens);
    return c.usable && c.prompt_tokens > 0 ? c.prompt_tokens : -1;
  }
  FillerModel& m() { return c_.filler; }

  // As Calibrator::Units (auditor/campaign/calibrate.cc): five one-unit
  // prompts show how much a unique prefix's count varies (twice that is the
  // tolerance); two and three units must add one unit each.
  void Units() {
    constexpr int kSamples = 5;
    std::vector<int> one;
    for (int i = 0; i < kSamples; ++i) {
      one.push_back(Count(BoundaryPrompt(buster_.Next(), 1)));
    }
    const int two = Count(BoundaryPrompt(buster_.Next(), 2));
    const int three = Count(BoundaryPrompt(buster_.Next(), 3));
    std::sort(one.begin(), one.end());
    if (one[0] <= 0 || two <= 0 || three <= 0) {
      c_.counts_failure =
          "the target reported no usage.prompt_tokens for short prompts";
      return;
    }
    m().tolerance = 2 * (one.back() - one[0]);
    const int median = one[kSamples / 2];
    const int unit = three - two;
    if (unit <= 0 || std::abs(two - median - unit) > m().tolerance) {
      c_.counts_failure = absl::StrFormat(
          "usage.prompt_tokens is not linear in the filler (%d, %d, %d for 1, "
          "2, 3 units)",
          median, two, three);
      return;
    }
    m().unit_tokens = unit;
    m().base[PromptKind::kCount] = median - unit;
  }

  void Limit() {
    if (o_.flag_limit > 0) {
      c_.limit.prompt_tokens = c_.limit.refuse_above = o_.flag_limit;
      c_.limit.source = "flag";
      c_.limit.where = "--max-prompt-tokens";
      return;
    }
    if (o_.advertised.prompt_tokens > 0) {
      c_.limit = o_.advertised;
      return;
    }
    if (!c_.counts_failure.empty()) {
      c_.limit.source = "unknown";
      c_.limit.where = "not advertised, and not measurable without counts";
      c_.limit_failure = c_.limit.where;
      return;
    }
    Ladder();
  }

  // The limit measured (auditor/target/limits.h) with count prompts built
  // to the token where a pad word exists: whole up to the lower bound,
  // refused or cut from the upper, both re-checked.
  void Ladder() {
    const int base = m().base[PromptKind::kCount];
    LimitMeasureOptions lo;
    lo.shortest_tokens = base;
    lo.grain_tokens = m().unit_tokens;
    lo.tolerance = m().tolerance;
    lo.max_tokens = o_.max_ladder_tokens;
    LadderResult r = MeasureLimit(
        [this](int tokens) {
          LadderStep s;
          const std::optional<Fill> f =
              FillFor(m(), PromptKind::kCount, tokens);
          if (!f.has_value()) {
            s.predicted = -1;
            return s;
          }
          s.predicted = f->predicted;
          const Completion c =
              Send(BuildAcceptPrompt(PromptKind::kCount, buster_.Next(), *f,
                                     m().pad, nullptr),
                   kBoundaryMaxTokens);
          s.answer = {c.status, c.usable ? c.prompt_tokens : -1};
          return s;
        },
        lo);
    c_.limit.source = r.found ? "measured" : "unknown";
    c_.limit.where = absl::StrCat("ladder: ", r.how);
    if (!r.found) {
      c_.limit_failure = absl::StrCat("no input limit: ", c_.limit.where,
                                      " (state it with --max-prompt-tokens)");
    } else {
      // Whole up to r.limit; refused or cut from r.upper on.
      c_.limit.prompt_tokens = r.limit;
      c_.limit.refuse_above = r.upper - 1;
    }
    if (r.truncates) {
      BoundaryObservation obs;
      obs.predicted_prompt_tokens = r.truncated.predicted;
      obs.http_status = 200;
      obs.reported_prompt_tokens = r.truncated.answer.prompt_tokens;
      obs.tolerance = m().tolerance;
      obs.tenant = o_.tenant.name;
      obs.template_name = "ladder";
      for (Finding& f : JudgeBoundary(obs)) c_.findings.push_back(std::move(f));
    }
    c_.ladder = std::move(r);
  }

  // A nonce the model echoes in the short echo prompt, alone. Nonces
  // sharing a word with the sweep's own text are passed over: their echo
  // would prove nothing.
  void Echo() {
    int text = 0, empty = 0;
    std::map<std::string, int> unusable;  // why -> answers
    for (int k = 0; c_.nonces_tried < o_.nonce_candidates && k < 64; ++k) {
      const canaries::Marker nonce = canaries::DeriveNonce(
          o_.secret_key, o_.tenant.name, o_.campaign_id, k);
      if (!NonceStandsOut(nonce)) continue;
      ++c_.nonces_tried;
      const Completion c =
          Send(ShortEchoPrompt(buster_.Next(), nonce), kBoundaryMaxTokens);
      if (!c.usable) {
        ++unusable[UnusableWhy(c)];
        continue;
      }
      ++(c.text.empty() ? empty : text);
      if (!CheckEcho(nonce, c.text, o_.tenant.name)) {
        c_.nonce = nonce;
        return;
      }
    }
    // Only usable text that never held the nonce says the model does not
    // echo; an answer that was not usable says nothing about the model.
    if (unusable.empty() && text > 0) {
      c_.echo_disabled =
          absl::StrCat("the model does not echo a nonce alone (",
                       c_.nonces_tried, " tried in the short echo prompt)");
      return;
    }
    std::vector<std::string> whys;
    int n = 0;
    for (const auto& [why, count] : unusable) {
      whys.push_back(absl::StrCat(count, " x ", why));
      n += count;
    }
    c_.echo_failure = absl::StrCat(
        "no echo calibration: of ", c_.nonces_tried, " short echo prompts, ", n,
        " got no usable answer", whys.empty() ? "" : " (",
        absl::StrJoin(whys, ", "), whys.empty() ? "" : ")", ", ", empty,
        " an empty one, ", text, " text without the nonce");
  }

  // Each kind's base: its prompt at one and two units, which must differ
  // by one unit (the filler counts the same way around the kind's text).
  void Kinds() {
    for (PromptKind kind : kAllPromptKinds) {
      if (kind == PromptKind::kCount) continue;
      if (IsEcho(kind) && !c_.nonce) continue;
      const canaries::Marker* nonce = c_.nonce ? &*c_.nonce : nullptr;
      const int one =
          Count(BuildAcceptPrompt(kind, buster_.Next(), Fill{1}, "", nonce));
      const int two =
          Count(BuildAcceptPrompt(kind, buster_.Next(), Fill{2}, "", nonce));
      if (one <= 0 || two <= 0 ||
          std::abs(two - one - m().unit_tokens) > m().tolerance) {
        c_.kind_failures[kind] = (absl::StrFormat(
            "%s prompts count %d and %d tokens at 1 and 2 units: not one unit "
            "(%d) apart",
            PromptKindName(kind), one, two, m().unit_tokens));
        continue;
      }
      m().base[kind] = one - m().unit_tokens;
    }
  }

  // A pad word that counts one token however many follow the filler, in
  // every kind: then every length is hit exactly.
  void Pad() {
    const int unit = m().unit_tokens;
    if (unit == 1) return;  // units alone hit every length
    for (const std::string& pad : PadCandidates()) {
      if (PadWorks(pad)) {
        m().pad = pad;
        return;
      }
    }
    c_.pad_failure = absl::StrCat(
        "no candidate pad word counted one token after the filler (",
        PadCandidates().size(), " tried)");
  }

  bool PadWorks(const std::string& pad) {
    const int unit = m().unit_tokens;
    if (!CountPadWorks(pad, unit, buster_.Next(),
                       [this](const std::string& p) { return Count(p); })) {
      return false;
    }
    // Around each kind's own text too (within the prefix tolerance).
    for (const auto& [kind, base] : m().base) {
      if (kind == PromptKind::kCount) continue;
      const Fill padded{1, unit - 1, base + 2 * unit - 1};
      const int c = Count(BuildAcceptPrompt(kind, buster_.Next(), padded, pad,
                                            c_.nonce ? &*c_.nonce : nullptr));
      if (c <= 0 || std::abs(c - padded.predicted) > m().tolerance) {
        return false;
      }
    }
    return true;
  }

  // The golden question alone at its shortest, `repeats` times (at least
  // twice), one prompt: deterministic alone if every answer is the same
  // and not empty.
  void Golden() {
    const std::string prefix = buster_.Next();
    const std::string prompt =
        BuildAcceptPrompt(PromptKind::kGolden, prefix, Fill{}, "", nullptr);
    std::set<std::string> answers;
    const int runs = std::max(2, o_.repeats);
    for (int i = 0; i < runs; ++i) {
      const Completion c = Send(prompt, kBoundaryMaxTokens);
      if (!c.usable) {
        c_.golden_failure = absl::StrCat(
            "the golden question got no usable answer alone (HTTP ", c.status,
            ")");
        return;
      }
      answers.insert(c.text);
      ++c_.golden_runs;
    }
    c_.golden_distinct = static_cast<int>(answers.size());
    if (answers.size() == 1 && answers.begin()->empty()) {
      c_.golden_failure =
          "the target answered the golden question alone with no text";
    } else if (answers.size() > 1) {
      c_.golden_disabled = absl::StrCat(
          "the golden question got ", answers.size(), " different answers in ",
          runs, " runs alone: not deterministic alone");
    } else {
      c_.golden_deterministic = true;
    }
  }

  const AcceptCalibrationOptions& o_;
  const SendAlone& send_;
  CacheBuster buster_;
  AcceptCalibration c_;
};

}  // namespace

json KindFailuresJson(const std::map<PromptKind, std::string>& failures) {
  json out = json::object();
  for (const auto& [kind, why] : failures) out[PromptKindName(kind)] = why;
  return out;
}

json AcceptCalibration::ToEvidence() const {
  json bases = json::object();
  for (const auto& [kind, base] : filler.base)
    bases[PromptKindName(kind)] = base;
  json out = {{"unit_tokens", filler.unit_tokens},
              {"tolerance", filler.tolerance},
              {"pad", filler.pad.empty() ? json(nullptr) : json(filler.pad)},
              {"bases", bases},
              {"counts_failure", counts_failure},
              {"kind_failures", KindFailuresJson(kind_failures)},
              {"pad_failure", pad_failure},
              {"limit",
               {{"prompt_tokens", limit.prompt_tokens},
                {"refuse_above", limit.refuse_above},
                {"context_tokens", limit.context_tokens},
                {"source", limit.source},
                {"where", limit.where}}},
              {"limit_failure", limit_failure},
              {"nonce", nonce ? json(nonce->id) : json(nullptr)},
              {"nonces_tried", nonces_tried},
              {"echo_disabled", echo_disabled},
              {"echo_failure", echo_failure},
              {"golden_deterministic", golden_deterministic},
              {"golden_runs", golden_runs},
              {"golden_distinct", golden_distinct},
              {"golden_disabled", golden_disabled},
              {"golden_failure", golden_failure},
              {"requests", requests}};
  if (ladder.has_value()) out["ladder"] = ladder->ToJson();
  return out;
}

AcceptCalibration CalibrateAccept(const AcceptCalibrationOptions& options,
                                  const SendAlone& send) {
  return AcceptCalibrator(options, send).Run();
}

}  // namespace kvcanary::auditor
