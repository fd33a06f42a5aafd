#include "auditor/audits/accept/accept.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "auditor/audits/accept/calibration.h"
#include "auditor/audits/accept/checks.h"
#include "auditor/audits/accept/sweep.h"
#include "auditor/campaign/command_result.h"
#include "auditor/evidence/log.h"
#include "common/clock.h"
#include "common/random.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;

// Cuts `why` to one line's worth for a reason.
std::string Brief(const std::string& why) {
  constexpr size_t kMax = 160;
  return why.size() <= kMax ? why : why.substr(0, kMax) + "...";
}

// Every stated check of one detector left in `error`: "2 checks in error
// (echo length 17, end: HTTP 502 alone, ...)", or "" if none.
std::string ErrorsText(const std::vector<Check>& checks,
                       const std::vector<std::string>& names) {
  int n = 0;
  std::string first;
  for (const Check& c : checks) {
    if (c.state != "error" ||
        std::find(names.begin(), names.end(), c.check) == names.end()) {
      continue;
    }
    if (n++ == 0)
      first = absl::StrCat(c.check, " ", c.subject, ": ", c.message);
  }
  if (n == 0) return "";
  return absl::StrCat(n, n == 1 ? " stated check" : " stated checks",
                      " ended in error, so not judged (first: ", Brief(first),
                      ")");
}

// A failure that outranks `disabled`: the detector stays required.
void Fail(DetectorCoverage* d, const std::string& why) {
  if (!d->disabled.empty()) {
    d->AddFailure(d->disabled);
    d->disabled.clear();
  }
  d->required = true;
  d->AddFailure(why);
}

class Accept {
 public:
  Accept(const AcceptOptions& o, AuditorMetrics* metrics)
      : o_(o), metrics_(metrics), key_(RandomHex(32)), session_(o.target) {}

  CampaignResult Run();

 private:
  absl::Status Steps();
  std::vector<DetectorCoverage> Coverage(std::vector<std::string>* problems);
  DetectorCoverage EchoCoverage();
  DetectorCoverage GoldenCoverage();
  DetectorCoverage BoundaryCoverage();
  json Details() const;
  json Summary() const;
  json SweepJson() const;
  std::string AccuracyText() const;
  std::string EchoText() const;
  std::string GoldenText() const;
  std::string GoldenCacheText() const;
  void Finish(const absl::Status& run);
  void Progress(const char* what) {
    if (!o_.progress) return;
    std::fprintf(stderr, "[kvcanary-auditor] accept %s\n", what);
  }

  const AcceptOptions& o_;
  AuditorMetrics* metrics_;
  const std::string key_;
  Target session_;
  std::unique_ptr<EvidenceLog> log_;
  AcceptCalibration cal_;
  std::unique_ptr<AcceptSweep> sweep_;
  CampaignResult r_;
};

absl::Status Accept::Steps() {
  if (session_.options().tenants.empty()) {
    return absl::InvalidArgumentError("accept needs at least one tenant");
  }
  RETURN_IF_ERROR(ValidateAcceptOptions(o_));
  ASSIGN_OR_RETURN(log_, EvidenceLog::Open(o_.db_path, r_.campaign_id));
  RETURN_IF_ERROR(log_->Record("campaign_start",
                               {{"command", "accept"},
                                {"target", session_.root()},
                                {"tenants", r_.tenants},
                                {"page_tokens", o_.page_tokens},
                                {"repeats", o_.repeats},
                                {"load", o_.load},
                                {"concurrency", o_.concurrency},
                                {"max_prompt_tokens", o_.max_prompt_tokens},
                                {"key_sha256", Sha256Hex(key_)}},
                               true));
  RETURN_IF_ERROR(session_.Discover());
  r_.model = session_.model();
  r_.api = ApiName(session_.api());
  metrics_->SetTargetApi(r_.api);
  r_.audit_started = true;  // the start checks passed: calibration probes
  AcceptCalibrationOptions co;
  co.tenant = session_.options().tenants[0];
  co.secret_key = key_;
  co.campaign_id = r_.campaign_id;
  co.flag_limit = o_.max_prompt_tokens;
  co.advertised = session_.advertised();
  co.max_ladder_tokens = o_.max_ladder_tokens;
  co.repeats = o_.repeats;
  cal_ = CalibrateAccept(
      co, [this](const AuditTenant& t, const std::string& prompt,
                 int max_tokens, bool stream) {
        return session_.SendAlone(t, prompt, max_tokens, stream);
      });
  // Its findings are kept even if the target died during it.
  for (const Finding& f : cal_.findings) {
    metrics_->CountFinding(f.kind, SeverityName(f.severity));
    r_.findings.push_back(f);
    RETURN_IF_ERROR(log_->Record("finding", f.ToJson(), true));
  }
  RETURN_IF_ERROR(session_.down());
  r_.limit = cal_.limit;
  RETURN_IF_ERROR(log_->Record("calibration", cal_.ToEvidence(), true));
  Progress("calibrated");
  sweep_ =
      std::make_unique<AcceptSweep>(o_, cal_, &session_, log_.get(), metrics_);
  sweep_->Plan();
  return sweep_->Run();
}

DetectorCoverage Accept::EchoCoverage() {
  const std::string& who = session_.options().tenants[0].name;
  DetectorCoverage echo;
  echo.name = "echo";
  echo.unit = "covered (length, position) pairs checked";
  int covered = 0, judged = 0;
  for (const LengthState& l : sweep_->tally().lengths) {
    if (l.length.past) continue;
    for (const auto& [p, c] : l.echo_covered) {
      if (!c) continue;
      ++covered;
      auto n = l.echo.find(p);
      judged += n != l.echo.end() && n->second.judged();
    }
  }
  // Required where it covers something; a model that writes text but
  // never the nonce is the only reason to rely on golden alone.
  echo.floor = std::max(1, covered);
  echo.coverage[who] = judged;
  if (!cal_.nonce.has_value()) {
    if (cal_.echo_disabled.empty()) {
      echo.AddFailure(cal_.echo_failure);
    } else {
      echo.required = false;
      echo.disabled = cal_.echo_disabled;
    }
  } else if (covered == 0) {
    echo.required = false;
    echo.disabled = absl::StrCat("no (length, position) pair echoed ",
                                 o_.repeats, " of ", o_.repeats, " alone");
  }
  for (PromptKind p : kEchoPositions) {
    auto k = cal_.kind_failures.find(p);
    if (k != cal_.kind_failures.end()) Fail(&echo, k->second);
  }
  const std::string errors = ErrorsText(r_.checks, {"echo"});
  if (!errors.empty()) Fail(&echo, errors);
  return echo;
}

DetectorCoverage Accept::GoldenCoverage() {
  const std::string& who = session_.options().tenants[0].name;
  const AcceptTally& t = sweep_->tally();
  DetectorCoverage golden;
  golden.name = "golden";
  golden.unit = absl::StrCat("lengths with golden judged (alone",
                             o_.load > 0 ? " and under load)" : ")");
  int lengths = 0, judged = 0;
  for (const LengthState& l : t.lengths) {
    if (l.length.past || !l.fills.count(PromptKind::kGolden)) continue;
    ++lengths;
    // A length whose answers differ alone is judged: nothing to hold the
    // answers under load to.
    judged +=
        l.golden.judged() && (o_.load == 0 || l.golden_under_load.judged() ||
                              l.golden.state == CheckState::kFailed);
  }
  golden.floor = std::max(1, lengths);
  golden.coverage[who] = judged;
  if (!cal_.golden_failure.empty()) {
    golden.AddFailure(cal_.golden_failure);
  } else if (!cal_.golden_deterministic) {
    golden.required = false;
    golden.disabled = cal_.golden_disabled;
  } else if (cal_.kind_failures.count(PromptKind::kGolden)) {
    golden.AddFailure(cal_.kind_failures.at(PromptKind::kGolden));
  }
  if (o_.load > 0 && t.load_usable == 0) {
    Fail(&golden, "no load request was answered: nothing ran under load");
  }
  const std::string errors =
      ErrorsText(r_.checks, {"golden", "golden_under_load"});
  if (!errors.empty()) Fail(&golden, errors);
  if (t.golden_load_cached > 0) golden.notes.push_back(GoldenCacheText());
  return golden;
}

DetectorCoverage Accept::BoundaryCoverage() {
  const std::string& who = session_.options().tenants[0].name;
  const AcceptTally& t = sweep_->tally();
  DetectorCoverage boundary;
  boundary.name = "boundary";
  boundary.unit = "lengths judged (counts within the limit, refusals past it)";
  int judged = 0;
  for (const LengthState& l : t.lengths) {
    judged += (l.length.past ? l.refusal : l.prompt_tokens).judged();
  }
  boundary.floor = std::max<int>(1, static_cast<int>(t.lengths.size()));
  boundary.coverage[who] = judged;
  const FillerModel& m = cal_.filler;
  if (!cal_.counts_failure.empty()) boundary.AddFailure(cal_.counts_failure);
  if (!cal_.limit_failure.empty()) boundary.AddFailure(cal_.limit_failure);
  if (t.refuse_above == 0 && cal_.limit_failure.empty() &&
      cal_.counts_failure.empty()) {
    boundary.AddFailure("no limit to sweep past");
  }
  if (m.unit_tokens > 1 && m.pad.empty()) {
    boundary.AddFailure(absl::StrCat(
        "page boundaries ±1 not reachable: the filler comes in units of ",
        m.unit_tokens, " tokens and ", cal_.pad_failure));
  }
  const std::string errors =
      ErrorsText(r_.checks, {"prompt_tokens", "refusal"});
  if (!errors.empty()) boundary.AddFailure(errors);
  return boundary;
}

std::string Accept::GoldenCacheText() const {
  const AcceptTally& t = sweep_->tally();
  return absl::StrCat(
      t.golden_load_cached, " of ", t.golden_load_answers,
      " golden answers under load reported cached prompt tokens (the same "
      "prompt was sent alone first): those may have reused what was "
      "computed alone rather than recomputed under load");
}

std::vector<DetectorCoverage> Accept::Coverage(
    std::vector<std::string>* problems) {
  const std::string& who = session_.options().tenants[0].name;
  std::vector<DetectorCoverage> out = {EchoCoverage(), GoldenCoverage(),
                                       BoundaryCoverage()};
  for (DetectorCoverage& d : out) {
    d.findings = 0;
    for (const Finding& f : r_.findings) d.findings += f.detector == d.name;
    d.Judge({who});
  }
  const AcceptTally& t = sweep_->tally();
  if (!t.over_cap.empty()) problems->push_back(t.over_cap);
  if (!out[0].required && !out[1].required) {
    problems->push_back(
        "nothing echoes and golden is not deterministic alone: no check "
        "that long prompts are processed as sent");
  }
  for (const auto& [tenant, n] : t.refused) {
    problems->push_back(absl::StrCat("tenant '", tenant, "' was refused (", n,
                                     " answers HTTP 401/403) after its key "
                                     "was accepted"));
  }
  return out;
}

// The short, human part: one line per question.
json Accept::Summary() const {
  const AcceptTally& t = sweep_->tally();
  const FillerModel& m = cal_.filler;
  std::vector<int> within, past;
  for (const LengthState& l : t.lengths) {
    (l.length.past ? past : within).push_back(l.length.tokens);
  }
  json d = json::object();
  // Every key was checked; the first tenant sweeps, the next `load` load.
  std::vector<std::pair<int, std::string>> used = {{0, "sweeps"}};
  for (int i = 1; i <= o_.load; ++i) used.push_back({i, "load"});
  d["tenants"] = TenantsUsedText(session_.options().tenants, used);
  d["limit"] = absl::StrCat(
      cal_.limit.prompt_tokens > 0 ? absl::StrCat(cal_.limit.prompt_tokens,
                                                  " prompt tokens, refuse "
                                                  "above ",
                                                  cal_.limit.refuse_above)
                                   : "unknown",
      " (", cal_.limit.source, ": ", cal_.limit.where, ")");
  auto shortest = m.base.find(PromptKind::kCount);
  d["lengths"] = absl::StrCat(
      within.size(), " within the limit (", RangesText(within), "), ",
      past.size(), " past it (", RangesText(past), ")",
      shortest == m.base.end()
          ? ""
          : absl::StrCat("; none below ", shortest->second,
                         " tokens, the shortest prompt (cache-busting prefix "
                         "and head)"));
  d["plan"] = t.over_cap.empty()
                  ? absl::StrCat(t.planned_lengths, " lengths, up to ",
                                 t.planned_requests, " requests (cap ",
                                 o_.max_lengths, " lengths)")
                  : t.over_cap;
  d["length_accuracy"] = AccuracyText();
  d["echo"] = EchoText();
  d["golden"] = GoldenText();
  d["load"] = o_.load == 0
                  ? std::string("none (--load=0): the check pass ran alone")
                  : absl::StrCat(o_.load, " tenants, ", t.load_sent,
                                 " requests (", t.load_usable,
                                 " answered) during the under-load "
                                 "pass, concurrency ",
                                 o_.concurrency);
  d["streamed_refusals"] =
      t.stream_control.empty()
          ? std::string("no positive control sent")
          : absl::StrCat(
                t.stream_control_usable ? "trusted: " : "not trusted: ",
                t.stream_control);
  d["requests"] = t.requests + t.load_sent + cal_.requests;
  return d;
}

std::string Accept::AccuracyText() const {
  const FillerModel& m = cal_.filler;
  if (m.unit_tokens == 0) return "no counts to build lengths from";
  if (!m.pad.empty() || m.unit_tokens == 1) {
    return absl::StrCat("exact: units of ", m.unit_tokens, " tokens",
                        m.pad.empty() ? "" : " plus pads '" + m.pad + "'",
                        " (1 token, measured)", "; a prefix's count varies ± ",
                        m.tolerance);
  }
  return absl::StrCat(
      "up to ", m.unit_tokens - 1,
      " tokens short of each length within the limit and over each past it "
      "(units of ",
      m.unit_tokens, " tokens, no one-token pad: ", cal_.pad_failure,
      "); checks name the length sent; ± ", m.tolerance);
}

std::string Accept::EchoText() const {
  const AcceptTally& t = sweep_->tally();
  if (!cal_.nonce.has_value()) {
    return cal_.echo_disabled.empty()
               ? absl::StrCat("failed: ", cal_.echo_failure)
               : absl::StrCat("disabled: ", cal_.echo_disabled,
                              "; relying on golden");
  }
  int pairs = 0, covered = 0;
  for (const LengthState& l : t.lengths) {
    pairs += l.echo_runs.size();
    for (const auto& [p, c] : l.echo_covered) covered += c;
  }
  return absl::StrCat("covered ", covered, " of ", pairs,
                      " (length, position) pairs (echoed ", o_.repeats, " of ",
                      o_.repeats, " alone): ", CoveredText(t.lengths));
}

std::string Accept::GoldenText() const {
  const AcceptTally& t = sweep_->tally();
  if (!cal_.golden_deterministic) {
    return absl::StrCat("disabled: ", cal_.golden_failure.empty()
                                          ? cal_.golden_disabled
                                          : cal_.golden_failure);
  }
  std::string cache;
  if (o_.load > 0 && t.golden_load_answers > 0) {
    cache = t.golden_load_cached > 0 ? "; " + GoldenCacheText()
            : t.golden_load_unknown == t.golden_load_answers
                ? "; the target reported no cached tokens, so whether the "
                  "answers under load were cache hits is not known"
                : "; no answer under load reported cached tokens";
  }
  return absl::StrCat("exact: one answer in ", cal_.golden_runs,
                      " runs alone at the shortest length; each length ",
                      o_.repeats, " runs alone",
                      o_.load > 0 ? " and under load" : "", cache);
}

// The machine part: everything the summary rests on.
json Accept::SweepJson() const {
  const AcceptTally& t = sweep_->tally();
  const FillerModel& m = cal_.filler;
  json covered = json::array();
  for (const LengthState& l : t.lengths) {
    for (const auto& [p, c] : l.echo_covered) {
      if (c) covered.push_back({l.length.tokens, PromptKindName(p)});
    }
  }
  json bases = json::object();
  for (const auto& [k, b] : m.base) bases[PromptKindName(k)] = b;
  json load_status = json::object();
  for (const auto& [s, n] : t.load_status) load_status[std::to_string(s)] = n;
  std::vector<std::string> load_tenants;
  for (int i = 1; i <= o_.load; ++i) {
    load_tenants.push_back(session_.options().tenants[i].name);
  }
  return {{"page_tokens", o_.page_tokens},
          {"repeats", o_.repeats},
          {"max_lengths", o_.max_lengths},
          {"planned_lengths", t.planned_lengths},
          {"planned_requests", t.planned_requests},
          {"within_max", t.within_max},
          {"refuse_above", t.refuse_above},
          {"limit_source", cal_.limit.source},
          {"limit_where", cal_.limit.where},
          {"filler",
           {{"unit_tokens", m.unit_tokens},
            {"tolerance", m.tolerance},
            {"pad", m.pad.empty() ? json(nullptr) : json(m.pad)},
            {"bases", bases},
            {"kind_failures", KindFailuresJson(cal_.kind_failures)}}},
          {"echo_nonce", cal_.nonce ? json(cal_.nonce->id) : json(nullptr)},
          {"covered_pairs", covered},
          {"end_echo_gaps", EndEchoGaps(t.lengths)},
          {"golden_deterministic", cal_.golden_deterministic},
          {"golden_under_load_cache",
           {{"answers", t.golden_load_answers},
            {"cached", t.golden_load_cached},
            {"not_reported", t.golden_load_unknown}}},
          {"stream_control",
           {{"sent", !t.stream_control.empty()},
            {"usable", t.stream_control_usable},
            {"what", t.stream_control}}},
          {"load",
           {{"tenants", load_tenants},
            {"requests", t.load_sent},
            {"answered", t.load_usable},
            {"by_status", load_status},
            {"seed", o_.seed}}},
          {"calibration_requests", cal_.requests},
          {"per_length", LengthsJson(t.lengths)}};
}

json Accept::Details() const {
  json d = Summary();
  d["sweep"] = SweepJson();
  return d;
}

void Accept::Finish(const absl::Status& run) {
  r_.ended_us = NowUs();
  std::vector<std::string> problems;
  // The sweep's findings count whatever stopped it (each was appended to
  // the evidence as it was made).
  if (sweep_ != nullptr) {
    for (const Finding& f : sweep_->tally().findings) r_.findings.push_back(f);
  }
  if (run.ok() && sweep_ != nullptr) {
    const AcceptTally& t = sweep_->tally();
    r_.checks = StatedChecks(t.lengths, o_.load > 0);
    if (!cal_.counts_failure.empty()) {
      r_.checks.push_back(
          {"prompt_tokens", "calibration", "error", cal_.counts_failure});
    }
    if (cal_.ladder.has_value() && cal_.ladder->truncates) {
      r_.checks.push_back(
          {"prompt_tokens",
           absl::StrCat("length ", cal_.ladder->truncated.predicted), "failed",
           absl::StrCat("the limit ladder got HTTP 200 with usage.prompt_"
                        "tokens ",
                        cal_.ladder->truncated.answer.prompt_tokens,
                        ": the prompt was cut")});
    }
    r_.detectors = Coverage(&problems);
    r_.details = Details();
    r_.probes = t.requests + t.load_sent;
    r_.usable = t.usable + t.load_usable;
    r_.by_kind = t.by_kind;
    r_.by_outcome = t.by_outcome;
    if (t.load_sent > 0) r_.by_kind["accept_load"] = t.load_sent;
  }
  NoteSpend(&r_, session_.spend());
  DecideResult(&r_, run, problems);
  SealResult(&r_, log_.get(),
             {{"requests", r_.probes},
              {"usable", r_.usable},
              {"calibration_requests", cal_.requests},
              {"checks", r_.checks.size()}},
             metrics_);
  Progress(VerdictName(r_.verdict));
}

CampaignResult Accept::Run() {
  StartResult(&r_, "accept", session_.root(), session_.options().tenants,
              o_.db_path, {"echo", "golden", "boundary"}, metrics_);
  absl::Status s = Steps();
  if (s.ok() && log_ != nullptr) s = log_->Flush();
  Finish(s);
  return std::move(r_);
}

}  // namespace

absl::Status ValidateAcceptOptions(const AcceptOptions& o) {
  if (o.repeats < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "accept: --repeats=", o.repeats,
        " must be >= 2 (k of k alone needs at least two runs to mean "
        "anything)"));
  }
  if (o.page_tokens < 1 || o.concurrency < 1 || o.max_lengths < 1 ||
      o.load < 0 || o.load >= static_cast<int>(o.target.tenants.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "accept: --page-tokens, --concurrency and --max-lengths must be >= 1 "
        "and --load below the number of tenants (",
        o.target.tenants.size(), ")"));
  }
  return absl::OkStatus();
}

CampaignResult RunAccept(const AcceptOptions& options,
                         AuditorMetrics* metrics) {
  return Accept(options, metrics).Run();
}

}  // namespace kvcanary::auditor
