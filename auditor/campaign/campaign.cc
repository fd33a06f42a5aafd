#include "auditor/campaign/campaign.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "auditor/campaign/command_result.h"
#include "auditor/campaign/coverage.h"
#include "auditor/campaign/positive_controls.h"
#include "auditor/campaign/probe_mix.h"
#include "auditor/detectors/detectors.h"
#include "auditor/detectors/kv_events.h"
#include "auditor/evidence/log.h"
#include "auditor/target/completion.h"
#include "auditor/target/http_client.h"
#include "auditor/target/multi_client.h"
#include "auditor/target/target.h"
#include "auditor/trace/join.h"
#include "canaries/marker.h"
#include "canaries/scanner.h"
#include "canaries/templates.h"
#include "common/clock.h"
#include "common/random.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "storage/evidence_store.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kSniffMaxTokens = 48;
constexpr int kQuietProbes = 3;

// A target's way of saying a prompt is too long: 400, 413 or 422 (also
// when it came inside a 200 stream).
bool IsRefusal(const Completion& c) {
  return c.status == 400 || c.status == 413 || c.status == 422;
}

// What each probe in flight was, for judging its answer.
struct InFlight {
  ProbeKind kind = ProbeKind::kSniff;
  int tenant = 0;
  bool stream = false;
  int golden_variant = -1;
  bool baseline = false;  // sent in the same-tenant baseline phase
  int predicted = 0;      // prompt tokens the calibration predicts
  std::vector<std::string> marker_ids;
  std::string prompt;  // what was sent: a run of a marker it holds is no leak
  std::string prompt_sha;
};

class Campaign {
 public:
  Campaign(const CampaignOptions& options, AuditorMetrics* metrics)
      : o_(options),
        metrics_(metrics),
        key_(options.secret_key.empty() ? RandomHex(32) : options.secret_key),
        session_(TargetOptions{options.target, options.tenants, options.model,
                               options.request_timeout,
                               options.max_consecutive_failures}),
        scanner_(canaries::kDefaultMinPartialWords) {}

  CampaignResult Run();

 private:
  absl::Status Steps();
  absl::Status StartTrace();
  void BuildScanner();
  void Controls();
  // The kinds of probe to send each tenant, and how many of each.
  ProbeMix Mix(bool rate_mode) const;
  absl::Status MainLoop();
  absl::Status QuietProbes();
  absl::Status CollectTrace();
  // The kv_events probe pairs (tenants 0 and 1), where a stream was given.
  absl::Status KvEventPairs();
  CoverageInputs Tallies() const;
  void Finish(const absl::Status& run);

  int Floor(const std::string& detector) const {
    return FloorOf(o_.floors, detector);
  }
  // The prompt of probe `id` of kind f->kind and the tokens it generates;
  // fills in f's fields.
  std::string ProbePrompt(uint64_t id, InFlight* f, int* max_tokens);
  // The request of probe `id`.
  ProbeRequest MakeProbe(uint64_t id, InFlight* f);
  // Judges one answer: evidence, coverage, findings.
  absl::Status Judge(int64_t id, const InFlight& f, const Completion& c);
  // The probe's evidence row and counts.
  absl::Status RecordProbe(int64_t id, const InFlight& f, const Completion& c);
  // Per kind: coverage and findings (appended to *found, which holds the
  // output scan's). JudgePlant returns false for a plant that was cut: its
  // answer is never coverage.
  bool JudgePlant(const InFlight& f, const Completion& c,
                  std::vector<Finding>* found);
  void JudgeGoldenProbe(const InFlight& f, const Completion& c,
                        std::vector<Finding>* found);
  void JudgeLimitProbe(const InFlight& f, const Completion& c,
                       std::vector<Finding>* found);
  absl::Status Record(const std::string& kind, json body, bool flush = false) {
    return log_ == nullptr ? absl::OkStatus()
                           : log_->Record(kind, std::move(body), flush);
  }
  absl::Status Flush() {
    return log_ == nullptr ? absl::OkStatus() : log_->Flush();
  }
  absl::Status AddFinding(Finding f, bool flush);
  void Progress(const char* what);

  const CampaignOptions& o_;
  AuditorMetrics* metrics_;
  const std::string key_;
  Target session_;
  std::unique_ptr<EvidenceLog> log_;
  canaries::MarkerScanner scanner_;
  std::vector<canaries::Marker> control_markers_;  // one per tenant
  std::vector<std::unique_ptr<TraceFollower>> followers_;
  std::unique_ptr<kv_events::KvEventsCheck> kv_;
  std::optional<kv_events::KvEventsOutcome> kv_out_;
  Calibration cal_;
  CacheBuster buster_;
  std::vector<TenantTally> tallies_;
  std::map<uint64_t, int> engine_requests_;  // engine request -> tenant
  int base_n_ = 0, base_div_ = 0, cross_n_ = 0, cross_div_ = 0;
  int64_t next_probe_ = 0;
  TraceTally trace_;
  std::vector<int64_t> probe_times_, error_times_;  // Unix µs
  CampaignResult r_;
};

absl::Status Campaign::AddFinding(Finding f, bool flush) {
  if (f.ts_us == 0) f.ts_us = NowUs();
  metrics_->CountFinding(f.kind, SeverityName(f.severity));
  json body = f.ToJson();
  r_.findings.push_back(std::move(f));
  return Record("finding", std::move(body), flush);
}

void Campaign::Progress(const char* what) {
  if (!o_.progress) return;
  std::fprintf(stderr, "[kvcanary-auditor] %s: %lld probes, %zu findings\n",
               what, static_cast<long long>(r_.probes), r_.findings.size());
}

absl::Status Campaign::StartTrace() {
  for (const std::string& url : o_.trace_urls) {
    followers_.push_back(
        std::make_unique<TraceFollower>(url, o_.trace_token, o_.trace_tls));
    RETURN_IF_ERROR(followers_.back()->Start());
  }
  return absl::OkStatus();
}

void Campaign::BuildScanner() {
  // Every marker a plant carries, and the next one of each tenant for the
  // positive control.
  for (size_t t = 0; t < o_.tenants.size(); ++t) {
    std::set<std::string> planted;
    for (const Plant& p : cal_.plants[t]) {
      planted.insert(p.marker_ids.begin(), p.marker_ids.end());
    }
    // Plants take counters from 0 up (calibration.h).
    const int used = static_cast<int>(planted.size());
    for (int k = 0; k <= used; ++k) {
      const canaries::Marker m =
          PlantMarker(key_, o_.tenants[t].name, r_.campaign_id, k);
      scanner_.Add(m, o_.tenants[t].name);
      if (k == used) control_markers_.push_back(m);
    }
  }
}

void Campaign::Controls() {
  ControlInputs in;
  in.scanner = &scanner_;
  for (const AuditTenant& t : o_.tenants) in.tenants.push_back(t.name);
  in.markers = control_markers_;
  in.calibration = &cal_;
  r_.positive_controls = RunPositiveControls(in);
  metrics_->SetPositiveControls(r_.positive_controls);
}

std::string Campaign::ProbePrompt(uint64_t id, InFlight* f, int* max_tokens) {
  TenantTally& n = tallies_[f->tenant];
  std::string prompt;
  *max_tokens = kSniffMaxTokens;
  switch (f->kind) {
    case ProbeKind::kPlant: {
      const auto& plants = cal_.plants[f->tenant];
      const Plant& p = plants[n.plant_cursor++ % plants.size()];
      prompt = p.text;
      f->marker_ids = p.marker_ids;
      f->predicted = p.predicted_tokens;
      *max_tokens = kPlantMaxTokens;
      break;
    }
    case ProbeKind::kSniff:
      prompt = canaries::SniffPrompt(id);
      break;
    case ProbeKind::kGolden: {
      // Every tenant goes through every variant in turn.
      auto it = cal_.golden.begin();
      std::advance(it, n.golden_cursor++ % cal_.golden.size());
      f->golden_variant = it->first;
      prompt = absl::StrCat(cal_.golden_prefix, " ",
                            canaries::GoldenPrompt(it->first));
      *max_tokens = kGoldenMaxTokens;
      break;
    }
    case ProbeKind::kEcho:
      prompt = canaries::EchoPrompt(*cal_.nonces[f->tenant]);
      f->marker_ids.push_back(cal_.nonces[f->tenant]->id);
      *max_tokens = kEchoMaxTokens;
      break;
    case ProbeKind::kAtLimit:
    case ProbeKind::kPastLimit: {
      const bool past = f->kind == ProbeKind::kPastLimit;
      const int units = past ? cal_.past_limit_units : cal_.at_limit_units;
      f->predicted = cal_.base_tokens + units * cal_.unit_tokens;
      // At the limit always streamed (its first token is timed); past it
      // alternately, so both ways of refusing are seen.
      f->stream = !past || id % 2 == 0;
      prompt = BoundaryPrompt(buster_.Next(), units);
      *max_tokens = kBoundaryMaxTokens;
      break;
    }
  }
  f->prompt = prompt;
  f->prompt_sha = Sha256Hex(prompt);
  return prompt;
}

ProbeRequest Campaign::MakeProbe(uint64_t id, InFlight* f) {
  int max_tokens = 0;
  const std::string prompt = ProbePrompt(id, f, &max_tokens);
  return session_.Request(id, o_.tenants[f->tenant], prompt, max_tokens,
                          f->stream);
}

absl::Status Campaign::RecordProbe(int64_t id, const InFlight& f,
                                   const Completion& c) {
  const char* kind = ProbeKindName(f.kind);
  const std::string outcome = Outcome(c);
  ++r_.probes;
  ++r_.by_kind[kind];
  ++r_.by_outcome[outcome];
  metrics_->CountProbe(kind, outcome);
  probe_times_.push_back(NowUs());
  if (c.usable) {
    ++r_.usable;
  } else if (!(f.kind == ProbeKind::kPastLimit && IsRefusal(c))) {
    error_times_.push_back(probe_times_.back());
  }
  if (c.status == 401 || c.status == 403) ++tallies_[f.tenant].refused;
  if (c.engine_request != 0) engine_requests_[c.engine_request] = f.tenant;
  json probe = {{"probe", id},
                {"kind", kind},
                {"tenant", o_.tenants[f.tenant].name},
                {"outcome", outcome},
                {"http_status", c.status},
                {"error_in_200", c.http_ok_error},
                {"ms", c.total_ms},
                {"prompt_sha256", f.prompt_sha},
                {"markers", f.marker_ids},
                {"response_id", c.response_id},
                {"engine_request", c.engine_request}};
  if (c.usable) {
    probe["output_sha256"] = Sha256Hex(c.text);
    probe["prompt_tokens"] = c.prompt_tokens;
    if (f.stream) probe["ttft_ms"] = c.ttft_ms;
  }
  return Record("probe", std::move(probe));
}

bool Campaign::JudgePlant(const InFlight& f, const Completion& c,
                          std::vector<Finding>* found) {
  TenantTally& n = tallies_[f.tenant];
  ++n.plants_sent;
  // Whole only when the target's count matches the auditor's own
  // prediction (auditor/target/limits.h JudgeCount).
  const CountFate fate =
      c.usable ? JudgeCount(f.predicted, c.prompt_tokens, cal_.plant_tolerance)
               : CountFate::kUnknown;
  if (fate == CountFate::kWhole) ++n.plants_whole;
  if (fate != CountFate::kCut) return true;
  // Cut: part of the prompt was not processed. A finding, never coverage.
  ++n.plants_cut;
  BoundaryObservation o{f.predicted,
                        0,
                        200,
                        c.prompt_tokens,
                        cal_.plant_tolerance,
                        o_.tenants[f.tenant].name,
                        "plant"};
  for (Finding& b : JudgeBoundary(o)) found->push_back(std::move(b));
  return false;
}

void Campaign::JudgeGoldenProbe(const InFlight& f, const Completion& c,
                                std::vector<Finding>* found) {
  if (!c.usable) return;
  TenantTally& n = tallies_[f.tenant];
  ++n.golden;
  n.golden_variants.insert(f.golden_variant);
  auto g = CompareGolden(f.golden_variant, cal_.golden[f.golden_variant],
                         c.text, o_.tenants[f.tenant].name);
  const bool foreign = !found->empty();  // the output scan's findings
  if (cal_.golden_by_rate.count(f.golden_variant)) {
    // Judged by rate at the end; only a divergence holding a foreign
    // marker is a finding by itself.
    (f.baseline ? base_n_ : cross_n_)++;
    if (g.has_value()) (f.baseline ? base_div_ : cross_div_)++;
    if (!foreign) g.reset();
  }
  if (g.has_value()) {
    // A divergence holding a foreign marker is the leak itself.
    if (foreign) g->severity = Severity::kCritical;
    found->push_back(*std::move(g));
  }
}

void Campaign::JudgeLimitProbe(const InFlight& f, const Completion& c,
                               std::vector<Finding>* found) {
  TenantTally& n = tallies_[f.tenant];
  const std::string& tenant = o_.tenants[f.tenant].name;
  const bool past = f.kind == ProbeKind::kPastLimit;
  const std::string tmpl = past ? "past_limit" : "at_limit";
  // Judged: a refusal past the limit, a 200 past it (a finding by itself),
  // or an answer at the limit whose count can be compared.
  if ((past && IsRefusal(c)) || (c.usable && (past || c.prompt_tokens >= 0))) {
    ++n.boundary;
  }
  BoundaryObservation o{f.predicted,
                        cal_.limit.refuse_above,
                        c.status,
                        c.usable ? c.prompt_tokens : -1,
                        cal_.tolerance,
                        tenant,
                        tmpl};
  for (Finding& b : JudgeBoundary(o)) found->push_back(std::move(b));
  if (f.stream && c.usable) {
    bool judged = false;
    auto l = JudgeLatency(cal_.latency,
                          c.prompt_tokens > 0 ? c.prompt_tokens : f.predicted,
                          c.ttft_ms, tenant, tmpl, &judged);
    if (judged) ++n.latency;
    if (l.has_value()) found->push_back(*std::move(l));
  }
}

absl::Status Campaign::Judge(int64_t id, const InFlight& f,
                             const Completion& c) {
  RETURN_IF_ERROR(RecordProbe(id, f, c));
  const std::string& tenant = o_.tenants[f.tenant].name;
  // Any text is scanned, even of an answer that broke off or ended in an
  // error: a leak in it is a leak all the same. Coverage counts whole
  // answers with text only.
  std::vector<Finding> found;
  if (!c.text.empty()) {
    found =
        ScanOutput(scanner_, c.text, tenant, ProbeKindName(f.kind), f.prompt);
  }
  bool covers = c.usable && !c.text.empty();
  switch (f.kind) {
    case ProbeKind::kPlant:
      covers = JudgePlant(f, c, &found) && covers;
      break;
    case ProbeKind::kGolden:
      JudgeGoldenProbe(f, c, &found);
      break;
    case ProbeKind::kEcho:
      if (c.usable) {
        ++tallies_[f.tenant].echo;
        auto e = CheckEcho(*cal_.nonces[f.tenant], c.text, tenant);
        if (e.has_value()) found.push_back(*std::move(e));
      }
      break;
    case ProbeKind::kAtLimit:
    case ProbeKind::kPastLimit:
      JudgeLimitProbe(f, c, &found);
      break;
    case ProbeKind::kSniff:
      break;
  }
  if (covers) ++tallies_[f.tenant].scanned;
  for (Finding& x : found) {
    x.probe = id;
    x.engine_request = c.engine_request;
    x.detail["probe"] = id;
    RETURN_IF_ERROR(AddFinding(std::move(x), /*flush=*/true));
  }
  return absl::OkStatus();
}

ProbeMix Campaign::Mix(bool rate_mode) const {
  const int tenants = static_cast<int>(o_.tenants.size());
  auto mix_floor = [this](const std::string& d) {
    const int f = Floor(d);
    return f + std::max(1, f / 10);  // a margin for answers that fail
  };
  ProbeMix mix(tenants,
               {mix_floor("output_scan"), mix_floor("output_scan") / 2,
                mix_floor("golden"), mix_floor("echo"), mix_floor("latency"),
                mix_floor("boundary") / 2},
               {3, 3, rate_mode ? 4 : 2, 1, 1, 1});
  for (int t = 0; t < tenants; ++t) {
    if (cal_.plants[t].empty()) mix.Disable(t, ProbeKind::kPlant);
    if (cal_.golden.empty()) mix.Disable(t, ProbeKind::kGolden);
    if (!cal_.nonces[t]) mix.Disable(t, ProbeKind::kEcho);
    if (cal_.unit_tokens == 0 || cal_.at_limit_units == 0) {
      mix.Disable(t, ProbeKind::kAtLimit);
    }
    if (cal_.unit_tokens == 0 || cal_.past_limit_units == 0) {
      mix.Disable(t, ProbeKind::kPastLimit);
    }
  }
  return mix;
}

absl::Status Campaign::MainLoop() {
  const int tenants = static_cast<int>(o_.tenants.size());
  const bool rate_mode = !cal_.golden_by_rate.empty();
  ProbeMix mix = Mix(rate_mode);
  std::map<uint64_t, InFlight> in_flight;
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
        InFlight f;
        // Tenants take turns, so pages one frees are reused by the next.
        f.tenant = static_cast<int>(sent % tenants);
        // The same-tenant baseline for golden rates: the first quarter,
        // every probe from tenant 0, every other one golden.
        f.baseline = in_baseline();
        if (f.baseline) f.tenant = 0;
        f.kind = f.baseline && sent % 2 == 0 && !cal_.golden.empty()
                     ? ProbeKind::kGolden
                     : mix.Next(f.tenant);
        const uint64_t id = static_cast<uint64_t>(next_probe_++);
        ++sent;
        ProbeRequest r = MakeProbe(id, &f);
        in_flight[id] = std::move(f);
        return r;
      },
      [&](ProbeResponse resp) {
        InFlight f = std::move(in_flight[resp.id]);
        in_flight.erase(resp.id);
        const Completion c = ParseCompletion(resp, f.stream);
        session_.NoteTransport(c);
        absl::Status s = Judge(static_cast<int64_t>(resp.id), f, c);
        if (!s.ok() && error.ok()) error = s;
        if (Clock::now() - last_progress > std::chrono::seconds(2)) {
          last_progress = Clock::now();
          Progress("running");
        }
      },
      done);
  RETURN_IF_ERROR(error);
  RETURN_IF_ERROR(session_.down());
  if (rate_mode) {
    auto g = JudgeGoldenRates(base_div_, base_n_, cross_div_, cross_n_);
    if (g.has_value()) RETURN_IF_ERROR(AddFinding(*std::move(g), true));
  }
  return Flush();
}

// Past-limit probes alone, after the load: under load first-token times
// only grow, so a first token too fast for its prompt is clearest here.
absl::Status Campaign::QuietProbes() {
  if (cal_.unit_tokens == 0 || cal_.past_limit_units == 0) {
    return absl::OkStatus();
  }
  for (int i = 0; i < kQuietProbes; ++i) {
    InFlight f;
    f.kind = ProbeKind::kPastLimit;
    f.tenant = i % static_cast<int>(o_.tenants.size());
    const int64_t id = next_probe_++;
    int max_tokens = 0;
    const std::string prompt = ProbePrompt(id, &f, &max_tokens);
    f.stream = true;  // the first token is what is judged here
    const Completion c =
        session_.SendAlone(o_.tenants[f.tenant], prompt, max_tokens, f.stream);
    RETURN_IF_ERROR(session_.down());
    RETURN_IF_ERROR(Judge(id, f, c));
  }
  return Flush();
}

absl::Status Campaign::CollectTrace() {
  std::map<uint64_t, std::string> requests;
  for (const auto& [request, tenant] : engine_requests_) {
    requests[request] = o_.tenants[tenant].name;
  }
  TraceCollection tc = CollectTraces(followers_, requests);
  trace_ = std::move(tc.tally);
  r_.trace_nodes = std::move(tc.nodes);
  for (const TraceNodeStats& n : r_.trace_nodes) {
    metrics_->CountTraceEvents(static_cast<double>(n.events),
                               static_cast<double>(n.dropped));
  }
  for (Finding& f : tc.findings) {
    RETURN_IF_ERROR(AddFinding(std::move(f), /*flush=*/false));
  }
  return Flush();
}

CoverageInputs Campaign::Tallies() const {
  CoverageInputs in;
  for (const AuditTenant& t : o_.tenants) in.tenants.push_back(t.name);
  in.floors = o_.floors;
  in.required = o_.required;
  in.calibration = &cal_;
  in.tallies = tallies_;
  in.controls = r_.positive_controls;
  for (const Finding& f : r_.findings) ++in.findings[f.detector];
  in.markers_registered = scanner_.size();
  in.golden_baseline_n = base_n_;
  in.golden_baseline_diverged = base_div_;
  in.golden_cross_n = cross_n_;
  in.golden_cross_diverged = cross_div_;
  in.trace = trace_;
  return in;
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
  json floors = json::object();
  for (const char* d : kDetectorNames) floors[d] = Floor(d);
  RETURN_IF_ERROR(Record("campaign_start",
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
                         true));
  RETURN_IF_ERROR(session_.Discover());
  r_.model = session_.model();
  // Followed before calibration, so the ledgers see every page the
  // campaign touches.
  RETURN_IF_ERROR(StartTrace());
  if (!o_.kv_events.endpoint.empty()) {
    kv_ = std::make_unique<kv_events::KvEventsCheck>(o_.kv_events);
    RETURN_IF_ERROR(kv_->Start());
  }
  r_.audit_started = true;  // the start checks passed: calibration probes
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
  // Its findings are kept even if the target died during it.
  for (Finding f : cal_.findings)
    RETURN_IF_ERROR(AddFinding(std::move(f), true));
  RETURN_IF_ERROR(session_.down());
  r_.limit = cal_.limit;
  RETURN_IF_ERROR(Record("calibration", cal_.ToEvidence(), true));
  BuildScanner();
  RETURN_IF_ERROR(scanner_.Compile());
  Controls();
  {
    json pc = json::object();
    for (const auto& [d, passed] : r_.positive_controls) pc[d] = passed;
    RETURN_IF_ERROR(Record("positive_control", pc, true));
  }
  Progress("calibrated");
  RETURN_IF_ERROR(MainLoop());
  RETURN_IF_ERROR(QuietProbes());
  RETURN_IF_ERROR(KvEventPairs());
  return CollectTrace();
}

absl::Status Campaign::KvEventPairs() {
  if (kv_ == nullptr) return absl::OkStatus();
  Progress("kv_events pairs");
  // A prefix of about a quarter of the limit in letters: several blocks.
  const int units =
      std::clamp(static_cast<int>(cal_.limit.prompt_tokens / 4), 16, 256);
  ASSIGN_OR_RETURN(kv_out_, kv_->Run(session_, o_.tenants[0], o_.tenants[1],
                                     units, log_.get()));
  metrics_->CountKvEvents(kv_out_->stream);
  for (Finding& f : kv_events::KvEventsFindings(*kv_out_)) {
    RETURN_IF_ERROR(AddFinding(std::move(f), /*flush=*/false));
  }
  return Flush();
}

void Campaign::Finish(const absl::Status& run) {
  r_.ended_us = NowUs();
  const CoverageInputs in = Tallies();
  if (run.ok()) r_.detectors = BuildCoverage(in);
  if (run.ok() && kv_out_.has_value()) {
    r_.detectors.push_back(kv_events::KvEventsCoverage(*kv_out_));
    r_.details["kv_events"] = kv_out_->ToJson();
  }
  const std::vector<std::string> problems =
      run.ok() ? TenantProblems(in) : std::vector<std::string>{};
  DecideResult(&r_, run, problems);
  const PlantSizing& sizing = cal_.sizing;
  r_.plants.form = sizing.form;
  r_.plants.markers_per_plant = sizing.markers_per_plant;
  r_.plants.prompt_tokens = sizing.median_tokens;
  r_.plants.fill = sizing.fill;
  for (const TenantTally& t : tallies_) {
    r_.plants.sent += t.plants_sent;
    r_.plants.accepted_whole += t.plants_whole;
  }
  r_.timeline = MakeTimeline(r_.started_us, r_.ended_us, probe_times_,
                             error_times_, r_.findings);
  SealResult(&r_, log_.get(),
             {{"probes", r_.probes},
              {"usable", r_.usable},
              {"trace_events", trace_.events},
              {"trace_dropped", trace_.dropped}},
             metrics_);
  Progress(VerdictName(r_.verdict));
}

CampaignResult Campaign::Run() {
  r_.started_us = NowUs();
  r_.campaign_id = NewCampaignId();
  r_.target = session_.root();
  r_.db_path = o_.db_path;
  for (const AuditTenant& t : o_.tenants) r_.tenants.push_back(t.name);
  tallies_.assign(o_.tenants.size(), TenantTally{});
  absl::Status s = Steps();
  for (auto& follower : followers_) (void)follower->Stop(absl::ZeroDuration());
  if (s.ok()) s = Flush();
  Finish(s);
  return std::move(r_);
}

}  // namespace

CampaignResult RunCampaign(const CampaignOptions& options,
                           AuditorMetrics* metrics) {
  return Campaign(options, metrics).Run();
}

}  // namespace kvcanary::auditor
