// `kvcanary-auditor facts` (docs/facts.md): read what the target (and the
// engine nodes given with --trace) reveal, fill the facts table, and check
// whether any endpoint shows one tenant's prompt or request to another
// tenant or to no key, proven by a planted marker.
#include "auditor/audits/facts/facts.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <memory>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "auditor/audits/facts/exposure.h"
#include "auditor/audits/facts/fields.h"
#include "auditor/audits/facts/reads.h"
#include "auditor/audits/facts/report.h"
#include "auditor/campaign/command_result.h"
#include "auditor/evidence/log.h"
#include "auditor/target/multi_client.h"
#include "auditor/trace/follower.h"
#include "canaries/marker.h"
#include "canaries/scanner.h"
#include "common/clock.h"
#include "common/random.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;

constexpr absl::Duration kMaxReadTimeout = absl::Seconds(10);
constexpr int kBehaviourMaxTokens = 4;
constexpr char kBehaviourPrompt[] = "Once upon a time";
// How long the trace streams are followed after the last read, for the
// tail of the plant's events.
constexpr absl::Duration kTraceGrace = absl::Milliseconds(500);

class Facts {
 public:
  Facts(const FactsOptions& options, AuditorMetrics* metrics)
      : o_(options),
        metrics_(metrics),
        key_(options.secret_key.empty() ? RandomHex(32) : options.secret_key),
        session_(options.target),
        scanner_(kExposureMinWords),
        read_timeout_(
            std::min(options.target.request_timeout, kMaxReadTimeout)) {}

  CampaignResult Run();

 private:
  const std::vector<AuditTenant>& tenants() const { return o_.target.tenants; }
  absl::Status Steps();
  absl::Status Discover();
  void StartTraces();
  std::vector<ReadSpec> Specs(const std::vector<const AuditTenant*>& readers,
                              bool with_no_key) const;
  absl::Status ReadBefore();
  absl::Status Behaviour();
  BehaviourProbe SendBehaviour(const std::string& kind,
                               const AuditTenant* reader, int max_tokens);
  absl::Status Plant();
  absl::Status ReadAfter();
  absl::Status FollowTraces();
  void Finish(const absl::Status& run);

  absl::Status Record(const std::string& kind, json body, bool flush = false) {
    return log_ == nullptr ? absl::OkStatus()
                           : log_->Record(kind, std::move(body), flush);
  }
  absl::Status Flush() {
    return log_ == nullptr ? absl::OkStatus() : log_->Flush();
  }
  absl::Status AddFinding(Finding f);
  void Progress(const std::string& what) const {
    if (o_.progress) {
      std::fprintf(stderr, "[kvcanary-auditor] facts: %s\n", what.c_str());
    }
  }

  const FactsOptions& o_;
  AuditorMetrics* metrics_;
  const std::string key_;
  Target session_;
  canaries::MarkerScanner scanner_;
  const absl::Duration read_timeout_;
  std::unique_ptr<EvidenceLog> log_;
  std::string model_;
  std::vector<std::unique_ptr<TraceFollower>> followers_;
  FactsRun run_;
  int64_t next_probe_ = 0;
  CampaignResult r_;
};

absl::Status Facts::AddFinding(Finding f) {
  if (f.ts_us == 0) f.ts_us = NowUs();
  metrics_->CountFinding(f.kind, SeverityName(f.severity));
  json body = f.ToJson();
  r_.findings.push_back(std::move(f));
  return Record("finding", std::move(body), /*flush=*/true);
}

// The base URL and its scheme; with tenants, the model, the advertised
// limit and every key checked with a completion (Target), as every command
// does: any failure (a refused key, an unreachable target, one that is not
// an OpenAI-compatible API) stops the command before its first read.
absl::Status Facts::Discover() {
  RETURN_IF_ERROR(session_.Connect());
  if (tenants().empty()) return absl::OkStatus();
  RETURN_IF_ERROR(session_.Discover());
  model_ = session_.model();
  r_.limit = session_.advertised();
  run_.no_plant.clear();
  return absl::OkStatus();
}

// Node trace streams, followed without a key from before the plant on.
void Facts::StartTraces() {
  for (const std::string& url : o_.node_urls) {
    followers_.push_back(std::make_unique<TraceFollower>(url));
    FactsTrace t;
    t.url = url;
    t.start = followers_.back()->Start();
    run_.traces.push_back(std::move(t));
  }
}

std::vector<ReadSpec> Facts::Specs(
    const std::vector<const AuditTenant*>& readers, bool with_no_key) const {
  std::vector<ReadSpec> specs;
  for (const std::string& path : FactsTargetPaths()) {
    if (with_no_key) specs.push_back({session_.root(), path, kNoKeyReader, ""});
    for (const AuditTenant* t : readers) {
      specs.push_back({session_.root(), path, t->name, t->api_key});
    }
  }
  for (const std::string& url : o_.node_urls) {
    for (const std::string& path : FactsNodePaths()) {
      specs.push_back({url, path, kNoKeyReader, "", /*node=*/true});
    }
  }
  return specs;
}

absl::Status Facts::ReadBefore() {
  std::vector<const AuditTenant*> readers;
  if (!tenants().empty()) readers.push_back(&tenants()[0]);
  run_.before = ReadEndpoints(Specs(readers, true), read_timeout_, false);
  bool any = false;
  std::string why;
  for (const EndpointRead& r : run_.before) {
    RETURN_IF_ERROR(Record("facts_read", r.Evidence()));
    if (r.spec.node) continue;
    any = any || r.answered();
    if (why.empty() && !r.answered()) why = r.error;
    if (r.spec.reader == kNoKeyReader) {
      const std::vector<std::string> fields = PromptLikeFields(r);
      if (!fields.empty()) {
        run_.hints.push_back(absl::StrCat(EndpointName(r.spec),
                                          " answers without a key with fields ",
                                          absl::StrJoin(fields, ", ")));
      }
    }
  }
  if (!any) {
    return absl::UnavailableError(
        absl::StrCat("target ", session_.root(),
                     " unreachable: no endpoint answered (", why, ")"));
  }
  if (model_.empty()) model_ = o_.target.model;
  // Without tenants: the first model /v1/models lists without a key.
  for (const EndpointRead& r : run_.before) {
    if (!model_.empty()) break;
    if (r.spec.path != "/v1/models" || r.status != 200) continue;
    const json j = json::parse(r.body, nullptr, false);
    if (j.is_object() && j.contains("data") && j["data"].is_array() &&
        !j["data"].empty() && j["data"][0].is_object()) {
      model_ = j["data"][0].value("id", "");
    }
  }
  return Flush();
}

BehaviourProbe Facts::SendBehaviour(const std::string& kind,
                                    const AuditTenant* reader, int max_tokens) {
  BehaviourProbe b;
  b.probe = next_probe_++;
  b.kind = kind;
  b.reader = reader == nullptr ? kNoKeyReader : reader->name;
  const bool stream = kind != kPlainCompletion;
  // The session's body for its API (completions or chat), with the model
  // facts read; a plain stream without stream_options, to see whether
  // usage comes unasked.
  json body = json::parse(session_.Body(kBehaviourPrompt, max_tokens, stream));
  body["model"] = model_;
  if (kind != kStreamUsageCompletion) body.erase("stream_options");
  b.request = session_.RequestLine();
  ProbeRequest req;
  req.url = session_.ApiUrl();
  req.body = body.dump();
  if (reader != nullptr) req.headers = session_.Headers(*reader);
  req.timeout = o_.target.request_timeout;
  bool sent = false;
  MultiClient(1).Run(
      [&]() -> std::optional<ProbeRequest> {
        if (sent) return std::nullopt;
        sent = true;
        return req;
      },
      [&](ProbeResponse r) { b.response = std::move(r); },
      [&] { return sent; });
  b.completion = session_.Parse(b.response, stream);
  if (reader != nullptr) session_.Note(*reader, b.completion);
  metrics_->CountProbe("facts", Outcome(b.completion));
  return b;
}

// How the target answers completions: usage in plain answers and streams,
// cached tokens — as the first tenant, or without a key when there are
// none; and, with tenants, whether a completion needs a key at all.
absl::Status Facts::Behaviour() {
  if (model_.empty()) return absl::OkStatus();  // no model to ask for
  const AuditTenant* as = tenants().empty() ? nullptr : &tenants()[0];
  run_.behaviour.push_back(
      SendBehaviour(kPlainCompletion, as, kBehaviourMaxTokens));
  run_.behaviour.push_back(
      SendBehaviour(kStreamCompletion, as, kBehaviourMaxTokens));
  const Completion& s = run_.behaviour.back().completion;
  if (!(s.usable && s.prompt_tokens >= 0)) {
    run_.behaviour.push_back(
        SendBehaviour(kStreamUsageCompletion, as, kBehaviourMaxTokens));
  }
  if (as != nullptr) {
    run_.behaviour.push_back(SendBehaviour(kPlainCompletion, nullptr, 1));
  }
  for (const BehaviourProbe& b : run_.behaviour) {
    const Completion& c = b.completion;
    json row = {{"probe", b.probe},
                {"kind", b.kind},
                {"reader", b.reader},
                {"http_status", c.status},
                {"outcome", Outcome(c)},
                {"sse", AnsweredAsStream(b.response)},
                {"prompt_sha256", Sha256Hex(kBehaviourPrompt)},
                {"prompt_tokens", c.prompt_tokens},
                {"cached_tokens", c.cached_tokens},
                {"response_id", c.response_id},
                {"engine_request", c.engine_request},
                {"ms", c.total_ms},
                {"headers", RevealingHeaders(b.response.headers)}};
    if (b.response.transport.ok()) {
      row["body_sha256"] = Sha256Hex(b.response.body);
      row["bytes"] = b.response.body.size();
    }
    if (c.usable) row["output_sha256"] = Sha256Hex(c.text);
    RETURN_IF_ERROR(Record("facts_completion", std::move(row)));
  }
  return Flush();
}

// The first tenant's completion holding a fresh marker.
absl::Status Facts::Plant() {
  if (!run_.no_plant.empty()) return absl::OkStatus();
  const AuditTenant& writer = tenants()[0];
  run_.plant.writer = writer.name;
  run_.plant.marker =
      canaries::DeriveMarker(key_, writer.name, r_.campaign_id, /*counter=*/0);
  run_.plant.prompt = PlantPrompt(run_.plant.marker);
  run_.plant.probe = next_probe_++;
  const Completion c = session_.SendAlone(writer, run_.plant.prompt, 1, false);
  metrics_->CountProbe("facts", Outcome(c));
  run_.plant.status = c.status;
  run_.plant.accepted = c.usable;
  run_.plant.response_id = c.response_id;
  run_.plant.engine_request = c.engine_request;
  run_.planted = c.usable;  // a 200 with an error body planted nothing
  if (!run_.planted) {
    run_.no_plant = absl::StrCat(
        "the plant was not accepted (",
        c.status == 0 ? "no HTTP answer" : absl::StrCat("HTTP ", c.status),
        c.error.ok() ? "" : ": ", c.error.ok() ? "" : c.error.message(), ")");
  }
  scanner_.Add(run_.plant.marker, writer.name);
  RETURN_IF_ERROR(scanner_.Compile());
  return Record("facts_plant",
                {{"probe", run_.plant.probe},
                 {"writer", writer.name},
                 {"marker", run_.plant.marker.id},
                 {"prompt_sha256", Sha256Hex(run_.plant.prompt)},
                 {"http_status", c.status},
                 {"outcome", Outcome(c)},
                 {"accepted", c.usable},
                 {"response_id", c.response_id},
                 {"engine_request", c.engine_request}},
                /*flush=*/true);
}

// What no key and every other tenant read right after the plant, searched
// for it.
absl::Status Facts::ReadAfter() {
  if (run_.plant.probe < 0) return absl::OkStatus();  // nothing planted
  std::vector<const AuditTenant*> readers;
  for (size_t t = 1; t < tenants().size(); ++t)
    readers.push_back(&tenants()[t]);
  run_.after = ReadEndpoints(Specs(readers, true), read_timeout_, true);
  for (const EndpointRead& r : run_.after) {
    const std::optional<ExposureHit> hit = FindPlant(scanner_, run_.plant, r);
    json row = r.Evidence();
    row["plant_found"] = hit.has_value() ? hit->what : "";
    RETURN_IF_ERROR(Record("facts_read", std::move(row)));
    if (hit.has_value()) {
      RETURN_IF_ERROR(AddFinding(
          ExposureFinding(run_.plant, r.spec, *hit, r.status, r.sha256)));
    }
  }
  return Flush();
}

// Stops the node trace streams; the plant's engine request in one of them
// is per-request activity readable without a key.
absl::Status Facts::FollowTraces() {
  // One deadline for every stream: each gets the tail up to it, whichever
  // of them could be followed.
  const absl::Time deadline = absl::Now() + kTraceGrace;
  for (size_t i = 0; i < followers_.size(); ++i) {
    FactsTrace& t = run_.traces[i];
    if (!t.start.ok()) continue;
    TraceFollower& f = *followers_[i];
    t.end = f.Stop(std::max(deadline - absl::Now(), absl::ZeroDuration()));
    const auto requests = f.request_tenants();
    t.events = f.stats().events;
    t.requests_seen = requests.size();
    t.plant_seen = run_.plant.engine_request != 0 &&
                   requests.count(run_.plant.engine_request) > 0;
    RETURN_IF_ERROR(Record("facts_trace",
                           {{"node", t.url},
                            {"events", t.events},
                            {"requests_seen", t.requests_seen},
                            {"plant_request", run_.plant.engine_request},
                            {"plant_seen", t.plant_seen},
                            {"stream", t.end.ok() ? "ok" : t.end.ToString()}}));
    if (t.plant_seen) {
      const ReadSpec where{t.url, "/v1/trace", kNoKeyReader, "", true};
      RETURN_IF_ERROR(AddFinding(ExposureFinding(
          run_.plant, where, {"activity_exposed", "engine_request", 0, false},
          200, "")));
    }
  }
  return Flush();
}

absl::Status Facts::Steps() {
  ASSIGN_OR_RETURN(log_, EvidenceLog::Open(o_.db_path, r_.campaign_id));
  RETURN_IF_ERROR(Record("campaign_start",
                         {{"command", "facts"},
                          {"target", session_.root()},
                          {"tenants", r_.tenants},
                          {"trace_nodes", o_.node_urls},
                          {"paths", FactsTargetPaths()},
                          {"node_paths", FactsNodePaths()},
                          {"key_sha256", Sha256Hex(key_)}},
                         true));
  RETURN_IF_ERROR(Discover());
  r_.audit_started = true;  // the start checks passed: endpoint reads
  StartTraces();
  RETURN_IF_ERROR(ReadBefore());
  Progress(absl::StrCat(run_.before.size(), " reads before the plant"));
  RETURN_IF_ERROR(Behaviour());
  RETURN_IF_ERROR(Plant());
  RETURN_IF_ERROR(ReadAfter());
  RETURN_IF_ERROR(FollowTraces());
  Progress(absl::StrCat(run_.after.size(), " reads after the plant, ",
                        r_.findings.size(), " findings"));
  for (const EndpointRead& r : run_.before)
    ReadEndpointFacts(r, model_, &run_.table);
  ReadNodeRoles(run_.before, &run_.table);
  for (const BehaviourProbe& b : run_.behaviour) {
    if (b.reader == kNoKeyReader) {
      ReadKeylessCompletion(b.request, b.kind, b.completion, &run_.table);
      if (!tenants().empty()) continue;
    }
    ReadCompletionFacts(b.request, b.kind, b.response, b.completion,
                        &run_.table);
  }
  for (const EndpointRead& r : run_.before) {
    ReadServerHeader(r.headers, &run_.table);
  }
  for (const BehaviourProbe& b : run_.behaviour) {
    ReadServerHeader(b.response.headers, &run_.table);
  }
  return Record("facts_table", run_.table.Sources(), true);
}

CampaignResult Facts::Run() {
  StartResult(&r_, "facts", session_.root(), tenants(), o_.db_path,
              {std::begin(kFactsDetectorNames), std::end(kFactsDetectorNames)},
              metrics_);
  run_.target = r_.target;
  run_.tenants = r_.tenants;
  run_.no_plant = "no --tenants: no marker could be planted";
  absl::Status s = Steps();
  for (auto& f : followers_) (void)f->Stop(absl::ZeroDuration());
  if (s.ok() && log_ != nullptr) s = log_->Flush();
  Finish(s);
  return std::move(r_);
}

void Facts::Finish(const absl::Status& run) {
  r_.ended_us = NowUs();
  r_.model = model_;
  r_.api = ApiName(session_.api());
  metrics_->SetTargetApi(r_.api);
  if (run.ok()) {
    r_.detectors = FactsDetectors(run_, r_.findings);
    r_.checks = FactsChecks(run_, r_.findings);
    r_.details = FactsDetails(run_, r_.findings);
  }
  NoteSpend(&r_, session_.spend());
  DecideResult(&r_, run, {});
  // An inconclusive run must fail a JUnit gate (one case per check) even
  // where no check says why.
  const bool says_why = std::any_of(
      r_.checks.begin(), r_.checks.end(),
      [](const Check& c) { return c.state == "error" || c.state == "failed"; });
  if (r_.verdict == Verdict::kInconclusive && !says_why) {
    r_.checks.push_back(
        {"verdict", "inconclusive", "error", absl::StrJoin(r_.reasons, "; ")});
  }
  SealResult(&r_, log_.get(),
             {{"endpoints_read", run_.before.size() + run_.after.size()},
              {"fields_revealed", run_.table.revealed()},
              {"planted", run_.planted}},
             metrics_);
  Progress(VerdictName(r_.verdict));
}

}  // namespace

CampaignResult RunFacts(const FactsOptions& options, AuditorMetrics* metrics) {
  return Facts(options, metrics).Run();
}

}  // namespace kvcanary::auditor
