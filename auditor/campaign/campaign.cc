// One campaign's start and run (RunCampaign, campaign.h): the evidence
// store opened and the start recorded, the target discovered, the
// detectors started, calibration with its scanner and positive controls,
// then the steps in order. What each probe sends and how its answer is
// judged: probes.cc; the load and the timed pairs: load.cc; the bursts and
// hang-ups: exercises.cc; the end, verdict and seal: verdict.cc.
#include "auditor/campaign/campaign.h"

#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "auditor/campaign/calibrate.h"
#include "auditor/campaign/campaign_internal.h"
#include "auditor/campaign/command_result.h"
#include "auditor/campaign/logprob_calibration.h"
#include "auditor/detectors/detector.h"
#include "auditor/detectors/registry.h"
#include "auditor/evidence/log.h"
#include "auditor/target/target.h"
#include "canaries/marker.h"
#include "canaries/scanner.h"
#include "common/random.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;

// A calibration filler's prompt, in boundary units: short, so its prefill
// is not what is measured, and answered as long as a golden prompt.
constexpr int kFillerUnits = 4;

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
                             options.max_consecutive_failures, options.api,
                             options.budget_tokens}),
      detectors_(CreateDetectors(options.broken)),
      settings_(Settings(options)),
      scanner_(canaries::kDefaultMinPartialWords) {}

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
  co.chat = session_.api() == Api::kChat;
  // The load's other slots filled by cache-busted prompts of the same
  // tenant, generating as long as a golden answer.
  co.send_loaded = [this](const AuditTenant& t, const std::string& prompt,
                          int max_tokens, const json& extra) {
    std::vector<std::string> fillers;
    for (int i = 1; i < o_.concurrency; ++i) {
      fillers.push_back(BoundaryPrompt(buster_.Next(), kFillerUnits));
    }
    return session_.SendBeside(t, prompt, max_tokens, false, extra, fillers,
                               kGoldenMaxTokens);
  };
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
      &cal_, session_.api() == Api::kChat, co.send_loaded);
  // Its findings are kept even if the target died during it.
  RETURN_IF_ERROR(AddFindings(cal_.findings, /*flush=*/true));
  RETURN_IF_ERROR(session_.down());
  if (session_.spend().stopped()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("--budget-tokens=", session_.spend().budget(),
                     " spent during calibration (", session_.spend().spent(),
                     " tokens): nothing was probed; raise the budget"));
  }
  r_.limit = cal_.limit;
  // The API it was measured over (a chat template's tokens are part of
  // every prompt there), and the shared head counted as uncached.
  json calibration = cal_.ToEvidence();
  calibration["api"] = r_.api;
  calibration["shared_head_tokens"] = session_.shared_head_tokens();
  RETURN_IF_ERROR(Record("calibration", std::move(calibration), true));
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
  r_.api = ApiName(session_.api());
  metrics_->SetTargetApi(r_.api);
  RETURN_IF_ERROR(StartDetectors());
  r_.audit_started = true;  // the start checks passed: calibration probes
  RETURN_IF_ERROR(Calibrated());
  Progress("calibrated");
  RETURN_IF_ERROR(MainLoop());
  RETURN_IF_ERROR(Bursts());
  RETURN_IF_ERROR(TimedPairs());
  return FinishDetectors(/*after_error=*/false);
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
