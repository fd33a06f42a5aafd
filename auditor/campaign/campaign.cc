#include "auditor/campaign/campaign.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "auditor/campaign/calibrate.h"
#include "auditor/campaign/campaign_internal.h"
#include "auditor/campaign/command_result.h"
#include "auditor/campaign/logprob_calibration.h"
#include "auditor/campaign/probe_mix.h"
#include "auditor/detectors/detector.h"
#include "auditor/detectors/registry.h"
#include "auditor/evidence/log.h"
#include "auditor/target/completion.h"
#include "auditor/target/multi_client.h"
#include "auditor/target/target.h"
#include "canaries/marker.h"
#include "canaries/scanner.h"
#include "canaries/templates.h"
#include "common/clock.h"
#include "common/random.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kSniffMaxTokens = 48;

// What the command asked the detectors to follow, and the floors.
DetectorSettings Settings(const CampaignOptions& o) {
  DetectorSettings s;
  s.trace_urls = o.trace_urls;
  s.trace_token = o.trace_token;
  s.trace_tls = o.trace_tls;
  s.kv_events = o.kv_events;
  s.floors = o.floors;
  return s;
}

}  // namespace

namespace campaign_internal {

Campaign::Campaign(const CampaignOptions& options, AuditorMetrics* metrics)
    : o_(options),
      metrics_(metrics),
      key_(options.secret_key.empty() ? RandomHex(32) : options.secret_key),
      session_(TargetOptions{options.target, options.tenants, options.model,
                             options.request_timeout,
                             options.max_consecutive_failures}),
      detectors_(CreateDetectors(options.broken)),
      settings_(Settings(options)),
      scanner_(canaries::kDefaultMinPartialWords) {}

absl::Status Campaign::AddFinding(Finding f, bool flush) {
  if (f.ts_us == 0) f.ts_us = NowUs();
  metrics_->CountFinding(f.kind, SeverityName(f.severity));
  json body = f.ToJson();
  r_.findings.push_back(std::move(f));
  return Record("finding", std::move(body), flush);
}

absl::Status Campaign::AddFindings(std::vector<Finding> found, bool flush) {
  for (Finding& f : found) RETURN_IF_ERROR(AddFinding(std::move(f), false));
  return flush ? Flush() : absl::OkStatus();
}

void Campaign::Progress(const char* what) {
  if (!o_.progress) return;
  std::fprintf(stderr, "[kvcanary-auditor] %s: %lld probes, %zu findings\n",
               what, static_cast<long long>(r_.probes), r_.findings.size());
}

void Campaign::BuildScanner() {
  // Every marker a plant carries, and the next one of each tenant for the
  // positive controls.
  for (size_t t = 0; t < o_.tenants.size(); ++t) {
    std::set<std::string> planted;
    for (const Plant& p : cal_.plants[t]) {
      planted.insert(p.marker_ids.begin(), p.marker_ids.end());
    }
    // Plants take counters from 0 up (calibrate.h).
    const int used = static_cast<int>(planted.size());
    for (int k = 0; k <= used; ++k) {
      const canaries::Marker m =
          PlantMarker(key_, o_.tenants[t].name, r_.campaign_id, k);
      scanner_.Add(m, o_.tenants[t].name);
      if (k == used) view_.control_markers.push_back(m);
    }
  }
}

// Each detector's positive control, through its own judging code on the
// campaign's objects; recorded before the first probe.
absl::Status Campaign::Controls() {
  for (const auto& d : detectors_) {
    const std::optional<bool> passed = RunControl(*d);
    if (passed.has_value()) r_.positive_controls[d->spec().name] = *passed;
  }
  metrics_->SetPositiveControls(r_.positive_controls);
  json pc = json::object();
  for (const auto& [d, passed] : r_.positive_controls) pc[d] = passed;
  return Record("positive_control", pc, true);
}

std::string Campaign::ProbePrompt(Probe* p, int* max_tokens) {
  TenantState& n = tenants_[p->tenant];
  std::string prompt;
  *max_tokens = kSniffMaxTokens;
  switch (p->kind) {
    case ProbeKind::kPlant: {
      const auto& plants = cal_.plants[p->tenant];
      const Plant& plant = plants[n.plant_cursor++ % plants.size()];
      prompt = plant.text;
      p->marker_ids = plant.marker_ids;
      p->predicted = plant.predicted_tokens;
      *max_tokens = kPlantMaxTokens;
      break;
    }
    case ProbeKind::kSniff:
      prompt = canaries::SniffPrompt(p->id);
      break;
    case ProbeKind::kGolden: {
      // Every tenant goes through every variant in turn.
      auto it = cal_.golden.begin();
      std::advance(it, n.golden_cursor++ % cal_.golden.size());
      p->golden_variant = it->first;
      prompt = absl::StrCat(cal_.golden_prefix, " ",
                            canaries::GoldenPrompt(it->first));
      *max_tokens = kGoldenMaxTokens;
      break;
    }
    case ProbeKind::kScore: {
      auto it = cal_.scored.alone.begin();
      std::advance(it, n.score_cursor++ % cal_.scored.alone.size());
      p->golden_variant = it->first;
      prompt = absl::StrCat(cal_.golden_prefix, " ",
                            canaries::GoldenPrompt(it->first));
      *max_tokens = kScoreMaxTokens;
      break;
    }
    case ProbeKind::kEcho:
      prompt = canaries::EchoPrompt(*cal_.nonces[p->tenant]);
      p->marker_ids.push_back(cal_.nonces[p->tenant]->id);
      *max_tokens = kEchoMaxTokens;
      break;
    case ProbeKind::kHangup:
      // Every other round of stages on one of the tenant's plants, which
      // come again later: what an aborted request leaves in a cache is
      // then read back (abort-cache-insert); else on a fresh at-limit
      // prompt, the longest prefill and transfer to land in.
      if ((n.hangup_cursor / kHangupStages) % 2 == 1 &&
          !cal_.plants[p->tenant].empty()) {
        const auto& plants = cal_.plants[p->tenant];
        const Plant& plant = plants[n.plant_cursor++ % plants.size()];
        prompt = plant.text;
        p->marker_ids = plant.marker_ids;
        p->predicted = plant.predicted_tokens;
        p->stream = true;
        *max_tokens = kBoundaryMaxTokens;
        break;
      }
      [[fallthrough]];
    case ProbeKind::kAtLimit:
    case ProbeKind::kPastLimit: {
      const bool past = p->kind == ProbeKind::kPastLimit;
      const int units = past ? cal_.past_limit_units : cal_.at_limit_units;
      p->predicted = cal_.base_tokens + units * cal_.unit_tokens;
      // At the limit always streamed (its first token is timed); past it
      // alternately, so both ways of refusing are seen.
      p->stream = !past || p->id % 2 == 0;
      prompt = BoundaryPrompt(buster_.Next(), units);
      *max_tokens = kBoundaryMaxTokens;
      break;
    }
  }
  p->prompt = prompt;
  return prompt;
}

ProbeRequest Campaign::MakeProbe(Probe* p) {
  int max_tokens = 0;
  const std::string prompt = ProbePrompt(p, &max_tokens);
  // Golden answers carry their log-probabilities where the target gives
  // them; scored prompts are echoed with theirs.
  json extra = nullptr;
  if (p->kind == ProbeKind::kGolden &&
      cal_.golden_logprobs.mode != LogprobMode::kOff) {
    extra = GoldenLogprobsFields();
  }
  if (p->kind == ProbeKind::kScore) extra = ScoreFields();
  ProbeRequest r =
      session_.Request(static_cast<uint64_t>(p->id), o_.tenants[p->tenant],
                       prompt, max_tokens, p->stream, extra);
  if (p->kind == ProbeKind::kHangup) AimHangup(p, &r);
  return r;
}

absl::Status Campaign::RecordProbe(const Probe& p, const Completion& c) {
  const char* kind = ProbeKindName(p.kind);
  const std::string outcome = Outcome(c);
  ++r_.probes;
  ++r_.by_kind[kind];
  ++r_.by_outcome[outcome];
  metrics_->CountProbe(kind, outcome);
  probe_times_.push_back(NowUs());
  if (c.usable) {
    ++r_.usable;
  } else if (!(p.kind == ProbeKind::kPastLimit && IsRefusal(c.status)) &&
             !c.hung_up) {
    error_times_.push_back(probe_times_.back());
  }
  if (c.status == 401 || c.status == 403) ++tenants_[p.tenant].refused;
  if (c.engine_request != 0) {
    io_.engine_requests[c.engine_request] = o_.tenants[p.tenant].name;
  }
  json probe = {{"probe", p.id},
                {"kind", kind},
                {"tenant", o_.tenants[p.tenant].name},
                {"outcome", outcome},
                {"http_status", c.status},
                {"error_in_200", c.http_ok_error},
                {"ms", c.total_ms},
                {"prompt_sha256", Sha256Hex(p.prompt)},
                {"markers", p.marker_ids},
                {"response_id", c.response_id},
                {"engine_request", c.engine_request}};
  if (p.pair >= 0) {
    probe["pair"] = p.pair;
    probe["pair_role"] = p.control ? "control" : "judged";
  }
  if (p.kind == ProbeKind::kHangup) probe["hangup"] = HangupStageName(p.hangup);
  if (p.burst >= 0) probe["burst"] = p.burst;
  if (c.usable) {
    probe["output_sha256"] = Sha256Hex(c.text);
    probe["prompt_tokens"] = c.prompt_tokens;
    if (p.stream) probe["ttft_ms"] = c.ttft_ms;
  }
  return Record("probe", std::move(probe));
}

absl::Status Campaign::OnAnswer(const ProbeResponse& resp,
                                std::map<uint64_t, Probe>* in_flight) {
  const Probe p = std::move((*in_flight)[resp.id]);
  in_flight->erase(resp.id);
  const Completion c = ParseCompletion(resp, p.stream);
  session_.NoteTransport(c);
  return Judge(p, c);
}

absl::Status Campaign::Judge(const Probe& p, const Completion& c) {
  RETURN_IF_ERROR(RecordProbe(p, c));
  std::vector<Finding> found;  // every detector's, in report order
  for (const auto& d : detectors_) {
    FindingList mine;
    d->Judge(p, c, found, mine);
    for (Finding& f : mine.findings) found.push_back(std::move(f));
  }
  for (Finding& x : found) {
    x.probe = p.id;
    x.engine_request = c.engine_request;
    x.detail["probe"] = p.id;
  }
  return AddFindings(std::move(found), /*flush=*/true);
}

// Each kind's floor is the most any detector needs of it (its floor, with
// a margin for answers that fail, times its share); the weights are the
// kinds' own: the leak hunt (plants, sniffs) most, golden more in rate
// mode.
ProbeMix Campaign::Mix(bool rate_mode) const {
  std::array<int, kProbeKinds> floors{};
  for (const auto& d : detectors_) {
    const int f = d->Floor(settings_);
    const int with_margin = f + std::max(1, f / 10);
    for (const auto& [kind, share] : d->spec().probes) {
      int& k = floors[static_cast<int>(kind)];
      k = std::max(k, static_cast<int>(with_margin * share));
    }
  }
  const int tenants = static_cast<int>(o_.tenants.size());
  // Hang-ups one probe in 12 once the floors are met (14 in rate mode).
  ProbeMix mix(tenants, floors, {3, 3, rate_mode ? 4 : 2, 1, 1, 1, 1, 1});
  for (int t = 0; t < tenants; ++t) {
    if (cal_.plants[t].empty()) mix.Disable(t, ProbeKind::kPlant);
    if (cal_.golden.empty()) mix.Disable(t, ProbeKind::kGolden);
    if (cal_.scored.mode == LogprobMode::kOff) {
      mix.Disable(t, ProbeKind::kScore);
    }
    if (!cal_.nonces[t]) mix.Disable(t, ProbeKind::kEcho);
    if (cal_.unit_tokens == 0 || cal_.at_limit_units == 0) {
      mix.Disable(t, ProbeKind::kAtLimit);
      mix.Disable(t, ProbeKind::kHangup);
    }
    if (cal_.unit_tokens == 0 || cal_.past_limit_units == 0) {
      mix.Disable(t, ProbeKind::kPastLimit);
    }
  }
  return mix;
}

absl::Status Campaign::MainLoop() {
  const int tenants = static_cast<int>(o_.tenants.size());
  const bool rate_mode = cal_.NeedsGoldenBaseline();
  ProbeMix mix = Mix(rate_mode);
  std::map<uint64_t, Probe> in_flight;
  const auto start = Clock::now();
  const auto deadline = start + absl::ToChronoMilliseconds(o_.duration);
  uint64_t sent = 0;
  auto last_progress = start;
  absl::Status error;
  auto in_baseline = [&] {
    if (!rate_mode) return false;
    if (o_.max_probes > 0) {
      return sent < static_cast<uint64_t>(o_.max_probes) / 4;
    }
    return Clock::now() - start < absl::ToChronoMilliseconds(o_.duration) / 4;
  };
  auto done = [&] {
    return !error.ok() || !session_.down().ok() || Clock::now() >= deadline ||
           (o_.max_probes > 0 && sent >= static_cast<uint64_t>(o_.max_probes));
  };
  MultiClient client(o_.concurrency);
  client.Run(
      [&]() -> std::optional<ProbeRequest> {
        if (done()) return std::nullopt;
        const double elapsed_s =
            std::chrono::duration<double>(Clock::now() - start).count();
        if (sent >= o_.max_rate * elapsed_s + 1) return std::nullopt;
        Probe p;
        // Tenants take turns, so pages one frees are reused by the next.
        p.tenant = static_cast<int>(sent % tenants);
        // The same-tenant baseline for golden rates and distances: the
        // first quarter, every probe from tenant 0, every other one golden
        // (every fourth scored instead, where scores are judged by
        // distance).
        p.baseline = in_baseline();
        if (p.baseline) p.tenant = 0;
        if (p.baseline && sent % 2 == 0 && !cal_.golden.empty()) {
          p.kind = sent % 4 == 2 && cal_.scored.mode == LogprobMode::kDistance
                       ? ProbeKind::kScore
                       : ProbeKind::kGolden;
        } else {
          p.kind = mix.Next(p.tenant);
        }
        p.id = next_probe_++;
        ++sent;
        ProbeRequest r = MakeProbe(&p);
        in_flight[static_cast<uint64_t>(p.id)] = std::move(p);
        return r;
      },
      [&](ProbeResponse resp) {
        absl::Status s = OnAnswer(resp, &in_flight);
        if (!s.ok() && error.ok()) error = s;
        if (Clock::now() - last_progress > std::chrono::seconds(2)) {
          last_progress = Clock::now();
          Progress("running");
        }
      },
      done);
  RETURN_IF_ERROR(error);
  RETURN_IF_ERROR(session_.down());
  return Flush();
}

// The timed pairs the detectors ask for (DetectorSpec::paired), after the
// load: per pair a probe of the kind and a cache-busted control at the
// limit, same tenant, each sent alone, back to back, in random order.
absl::Status Campaign::TimedPairs() {
  std::map<ProbeKind, int> pairs;  // kind -> how many, the most any asks
  const int tenants = static_cast<int>(o_.tenants.size());
  for (const auto& d : detectors_) {
    const int n = std::max(d->spec().paired_at_least,
                           tenants * (d->Floor(settings_) + 1));
    for (const ProbeKind kind : d->spec().paired) {
      pairs[kind] = std::max(pairs[kind], n);
    }
  }
  if (cal_.unit_tokens == 0 || cal_.at_limit_units == 0) {
    return absl::OkStatus();  // no control to pair with
  }
  if (cal_.past_limit_units == 0) pairs.erase(ProbeKind::kPastLimit);
  int most = 0;
  for (const auto& [kind, n] : pairs) most = std::max(most, n);
  int64_t pair = 0;
  for (int i = 0; i < most; ++i) {
    for (const auto& [kind, n] : pairs) {
      if (i >= n) continue;
      Probe judged, control;
      judged.kind = kind;
      control.kind = ProbeKind::kAtLimit;
      judged.tenant = control.tenant = i % tenants;
      judged.pair = control.pair = pair++;
      control.control = true;
      Probe* order[2] = {&judged, &control};
      if (RandomU64() & 1) std::swap(order[0], order[1]);
      for (Probe* p : order) {
        p->id = next_probe_++;
        int max_tokens = 0;
        const std::string prompt = ProbePrompt(p, &max_tokens);
        p->stream = true;  // its first token is what is judged
        const Completion c = session_.SendAlone(o_.tenants[p->tenant], prompt,
                                                max_tokens, p->stream);
        RETURN_IF_ERROR(session_.down());
        RETURN_IF_ERROR(Judge(*p, c));
      }
    }
  }
  return Flush();
}

// After the probes: what each detector judges over the whole campaign
// (the kv_events pairs, golden's rates, the trace's ledgers).
absl::Status Campaign::FinishDetectors(bool after_error) {
  for (const bool sends : {true, false}) {
    for (const auto& d : detectors_) {
      if (d->spec().finish_sends != sends || (sends && after_error) ||
          !finished_.insert(d.get()).second) {
        continue;
      }
      FindingList found;
      const absl::Status s = d->Finish(io_, found);
      // What it found before an error is kept.
      RETURN_IF_ERROR(AddFindings(std::move(found.findings), /*flush=*/true));
      RETURN_IF_ERROR(s);
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> Campaign::TenantProblems() const {
  std::vector<std::string> out;
  for (size_t t = 0; t < o_.tenants.size(); ++t) {
    if (tenants_[t].refused > 0) {
      out.push_back(absl::StrCat(
          o_.tenants[t].name, ": ", tenants_[t].refused,
          " probes refused (HTTP 401/403) after its key was accepted: the "
          "tenant is not covered"));
    }
  }
  return out;
}

absl::Status Campaign::RecordStart() {
  json floors = json::object();
  for (const auto& d : detectors_) floors[d->spec().name] = d->Floor(settings_);
  return Record("campaign_start",
                {{"target", session_.root()},
                 {"tenants", r_.tenants},
                 {"trace_nodes", o_.trace_urls},
                 {"duration_s", absl::ToDoubleSeconds(o_.duration)},
                 {"max_probes", o_.max_probes},
                 {"concurrency", o_.concurrency},
                 {"rate", o_.max_rate},
                 {"floors", floors},
                 {"required", o_.required},
                 {"key_sha256", Sha256Hex(key_)},
                 {"command", "probe"}},
                true);
}

// Each detector starts following what it reads besides answers (trace
// streams, KV events) before calibration, so it sees every page and block
// the campaign touches.
absl::Status Campaign::StartDetectors() {
  io_.target = &session_;
  io_.tenants = &o_.tenants;
  io_.log = log_.get();
  io_.metrics = metrics_;
  for (const auto& d : detectors_) RETURN_IF_ERROR(d->Start(settings_, io_));
  return absl::OkStatus();
}

// Calibration alone, its evidence, the scanner, and the detectors
// prepared and their controls run.
absl::Status Campaign::Calibrated() {
  CalibrationOptions co;
  co.tenants = o_.tenants;
  co.secret_key = key_;
  co.campaign_id = r_.campaign_id;
  co.flag_limit = o_.max_prompt_tokens;
  co.advertised = session_.advertised();
  co.max_ladder_tokens = o_.max_ladder_tokens;
  cal_ = Calibrate(co, [this](const AuditTenant& t, const std::string& prompt,
                              int max_tokens, bool stream) {
    return session_.SendAlone(t, prompt, max_tokens, stream);
  });
  CalibrateLogprobs(
      o_.tenants[0],
      [this](const AuditTenant& t, const std::string& prompt, int max_tokens,
             bool stream, const json& extra) {
        return session_.SendAlone(t, prompt, max_tokens, stream, extra);
      },
      &cal_);
  // Its findings are kept even if the target died during it.
  RETURN_IF_ERROR(AddFindings(cal_.findings, /*flush=*/true));
  RETURN_IF_ERROR(session_.down());
  r_.limit = cal_.limit;
  RETURN_IF_ERROR(Record("calibration", cal_.ToEvidence(), true));
  BuildScanner();
  RETURN_IF_ERROR(scanner_.Compile());
  view_.tenants = r_.tenants;
  view_.calibration = &cal_;
  view_.scanner = &scanner_;
  for (const auto& d : detectors_) d->Prepare(view_);
  return Controls();
}

absl::Status Campaign::Steps() {
  if (o_.tenants.size() < 2) {
    return absl::InvalidArgumentError("a campaign needs at least two tenants");
  }
  if (o_.concurrency < 1 || o_.max_rate <= 0) {
    return absl::InvalidArgumentError(
        "--concurrency must be >= 1 and --rate > 0");
  }
  ASSIGN_OR_RETURN(log_, EvidenceLog::Open(o_.db_path, r_.campaign_id));
  RETURN_IF_ERROR(RecordStart());
  RETURN_IF_ERROR(session_.Discover());
  r_.model = session_.model();
  RETURN_IF_ERROR(StartDetectors());
  r_.audit_started = true;  // the start checks passed: calibration probes
  RETURN_IF_ERROR(Calibrated());
  Progress("calibrated");
  RETURN_IF_ERROR(MainLoop());
  RETURN_IF_ERROR(Bursts());
  RETURN_IF_ERROR(TimedPairs());
  return FinishDetectors(/*after_error=*/false);
}

void Campaign::Finish(const absl::Status& run) {
  r_.ended_us = NowUs();
  if (run.ok()) {
    CoverageRules rules;
    rules.tenants = r_.tenants;
    rules.settings = settings_;
    rules.required = o_.required;
    std::map<std::string, int> findings;
    for (const Finding& f : r_.findings) ++findings[f.detector];
    for (const auto& d : detectors_) {
      const std::string& name = d->spec().name;
      auto c = r_.positive_controls.find(name);
      rules.control = c == r_.positive_controls.end()
                          ? std::nullopt
                          : std::optional<bool>(c->second);
      rules.findings = findings[name];
      r_.detectors.push_back(JudgedCoverage(*d, rules));
    }
  }
  for (const auto& d : detectors_) d->Report(&r_);
  DecideResult(&r_, run,
               run.ok() ? TenantProblems() : std::vector<std::string>{});
  const PlantSizing& sizing = cal_.sizing;
  r_.plants.form = sizing.form;
  r_.plants.markers_per_plant = sizing.markers_per_plant;
  r_.plants.prompt_tokens = sizing.median_tokens;
  r_.plants.fill = sizing.fill;
  r_.timeline = MakeTimeline(r_.started_us, r_.ended_us, probe_times_,
                             error_times_, r_.findings);
  uint64_t trace_events = 0, trace_dropped = 0;
  for (const TraceNodeStats& n : r_.trace_nodes) {
    trace_events += n.events;
    trace_dropped += n.dropped;
  }
  SealResult(&r_, log_.get(),
             {{"probes", r_.probes},
              {"usable", r_.usable},
              {"trace_events", trace_events},
              {"trace_dropped", trace_dropped}},
             metrics_);
  Progress(VerdictName(r_.verdict));
}

CampaignResult Campaign::Run() {
  std::vector<std::string> names;
  for (const auto& d : detectors_) names.push_back(d->spec().name);
  StartResult(&r_, "probe", session_.root(), o_.tenants, o_.db_path, names,
              metrics_);
  tenants_.assign(o_.tenants.size(), TenantState{});
  absl::Status s = Steps();
  // The target failed after the audit started: what the detectors that
  // only read (the trace's ledgers, golden's rates) proved before it is
  // kept, beside the error.
  if (!s.ok() && r_.audit_started) {
    (void)FinishDetectors(/*after_error=*/true);
  }
  for (const auto& d : detectors_) d->Stop();
  if (s.ok()) s = Flush();
  Finish(s);
  return std::move(r_);
}

}  // namespace campaign_internal

CampaignResult RunCampaign(const CampaignOptions& options,
                           AuditorMetrics* metrics) {
  return campaign_internal::Campaign(options, metrics).Run();
}

}  // namespace kvcanary::auditor
