#include "auditor/campaign.h"

#include <openssl/sha.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "auditor/completion.h"
#include "auditor/detectors.h"
#include "auditor/http_client.h"
#include "auditor/multi_client.h"
#include "auditor/trace_follower.h"
#include "canaries/marker.h"
#include "canaries/scanner.h"
#include "canaries/templates.h"
#include "common/status_macros.h"
#include "storage/evidence_store.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kMarkersPerTenant = 32;
constexpr int kMarkersPerPlant = 3;
constexpr int kGoldenVariants = 3;
constexpr int kPlantMaxTokens = 4;
constexpr int kSniffMaxTokens = 48;
constexpr int kGoldenMaxTokens = 32;
constexpr int kEchoMaxTokens = 24;
constexpr int kBoundaryMaxTokens = 16;
constexpr int kNonceCandidates = 4;
// The boundary probes' unit of prompt text: plain words, so tokenizers
// count it the same way every time it is repeated.
constexpr absl::string_view kBoundaryUnit = " Tom had a red ball.";

std::string RandomHex(int bytes) {
  std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < bytes; ++i) {
    const unsigned v = rd() & 0xff;
    out.push_back(kHex[v >> 4]);
    out.push_back(kHex[v & 15]);
  }
  return out;
}

int64_t NowUs() { return absl::ToUnixMicros(absl::Now()); }

std::string BoundaryPrompt(int units) {
  std::string p = "Once upon a time.";
  for (int i = 0; i < units; ++i) absl::StrAppend(&p, kBoundaryUnit);
  return p;
}

class Campaign {
 public:
  Campaign(const CampaignOptions& options, AuditorMetrics* metrics)
      : o_(options),
        metrics_(metrics),
        key_(options.secret_key.empty() ? RandomHex(32) : options.secret_key),
        scanner_(canaries::kDefaultMinPartialWords) {}

  absl::StatusOr<CampaignResult> Run();

 private:
  std::vector<std::string> Headers(const AuditTenant& t) const {
    return {"Authorization: Bearer " + t.api_key};
  }
  std::string Body(const std::string& prompt, int max_tokens,
                   bool stream) const {
    json j = {{"model", model_},
              {"prompt", prompt},
              {"max_tokens", max_tokens},
              {"temperature", 0}};
    if (stream) j["stream"] = true;
    return j.dump();
  }
  // One request, alone (calibration).
  Completion CompleteAlone(const AuditTenant& t, const std::string& prompt,
                           int max_tokens, bool stream) {
    Completion result;
    MultiClient one(1);
    bool sent = false;
    one.Run(
        [&]() -> std::optional<ProbeRequest> {
          if (sent) return std::nullopt;
          sent = true;
          ProbeRequest r;
          r.url = o_.target + "/v1/completions";
          r.body = Body(prompt, max_tokens, stream);
          r.headers = Headers(t);
          r.timeout = o_.request_timeout;
          return r;
        },
        [&](ProbeResponse r) { result = ParseCompletion(r, stream); },
        [&] { return sent; });
    return result;
  }

  absl::Status Record(const std::string& kind, json body, bool flush = false) {
    storage::EvidenceRecord r;
    r.kind = kind;
    r.campaign = id_;
    r.ts_us = NowUs();
    r.body = std::move(body);
    pending_.push_back(std::move(r));
    if (flush || pending_.size() >= 64) return Flush();
    return absl::OkStatus();
  }
  absl::Status Flush() {
    if (pending_.empty()) return absl::OkStatus();
    auto seqs = store_->Append(pending_);
    if (seqs.ok()) pending_.clear();  // on failure kept, for a retry
    return seqs.status();
  }
  absl::Status AddFinding(Finding f) {
    metrics_->CountFinding(f.kind, SeverityName(f.severity));
    json body = {{"kind", f.kind},
                 {"severity", SeverityName(f.severity)},
                 {"detector", f.detector},
                 {"detail", f.detail}};
    result_.findings.push_back(std::move(f));
    return Record("finding", std::move(body), /*flush=*/true);
  }
  void Progress(const char* what) {
    if (!o_.progress) return;
    std::fprintf(stderr, "[kvcanary-auditor] %s: %lld probes, %zu findings\n",
                 what, static_cast<long long>(result_.probes),
                 result_.findings.size());
  }

  absl::Status Discover();
  absl::Status Calibrate();
  absl::Status MainLoop();
  // Whether probe number `probe` falls in the same-tenant baseline phase.
  bool InBaseline(uint64_t probe, Clock::time_point start) const;
  // Past-limit probes alone, after the load: under load first-token times
  // only grow, so the latency check is judged on quiet probes.
  absl::Status QuietProbes();

  const CampaignOptions& o_;
  AuditorMetrics* metrics_;
  const std::string key_;
  std::string id_;
  std::string model_;
  int limit_ = 0;          // advertised max prompt tokens (0: unknown)
  int max_model_len_ = 0;  // advertised context (0: unknown)
  std::unique_ptr<storage::EvidenceStore> store_;
  std::vector<storage::EvidenceRecord> pending_;
  canaries::MarkerScanner scanner_;
  std::vector<std::vector<canaries::Marker>> markers_;  // per tenant
  std::vector<canaries::Marker> nonces_;                // per tenant
  std::vector<bool> echo_ok_;  // per tenant: its nonce echoes alone
  std::vector<std::unique_ptr<TraceFollower>> followers_;
  // Calibration.
  std::map<int, std::string> golden_;  // variant -> answer alone
  // Variants whose answers differ even alone: judged by rate (the first
  // answer alone is the reference). Then the first quarter of the probes
  // all come from tenant 0 (same-tenant load, the baseline).
  std::set<int> golden_by_rate_;
  int base_n_ = 0, base_div_ = 0, cross_n_ = 0, cross_div_ = 0;
  bool echo_ = false;
  int unit_base_ = 0, unit_tokens_ = 0;  // prompt tokens = base + units*tok
  int at_limit_units_ = 0, past_limit_units_ = 0;
  LatencyModel latency_;
  CampaignResult result_;
};

absl::Status Campaign::Discover() {
  HttpClient http;
  auto res = http.Get(o_.target + "/v1/models", Headers(o_.tenants[0]),
                      absl::Seconds(10));
  if (!res.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "target ", o_.target, " unreachable: ", res.status().message()));
  }
  if (res->status == 401 || res->status == 403) {
    return absl::PermissionDeniedError(absl::StrCat(
        "target ", o_.target, " refused tenant '", o_.tenants[0].name,
        "' key (HTTP ", res->status, "): check the tenants file"));
  }
  const json j = json::parse(res->body, nullptr, false);
  if (res->status != 200 || !j.is_object() || !j.contains("data") ||
      !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].contains("id") || !j["data"][0]["id"].is_string()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "target ", o_.target, "/v1/models answered HTTP ", res->status,
        " without a model list: not an OpenAI-compatible API"));
  }
  // Every tenant's key must work: a tenant whose probes all get 401 would
  // be counted as checked when nothing was.
  for (size_t i = 1; i < o_.tenants.size(); ++i) {
    auto other = http.Get(o_.target + "/v1/models", Headers(o_.tenants[i]),
                          absl::Seconds(10));
    if (!other.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "target ", o_.target, " unreachable: ", other.status().message()));
    }
    if (other->status != 200) {
      return absl::PermissionDeniedError(absl::StrCat(
          "target ", o_.target, " refused tenant '", o_.tenants[i].name,
          "' key (HTTP ", other->status, "): check the tenants file"));
    }
  }
  const json& m = j["data"][0];
  model_ = o_.model.empty() ? m["id"].get<std::string>() : o_.model;
  limit_ = o_.max_prompt_tokens;
  if (limit_ == 0 && m.contains("max_prompt_tokens") &&
      m["max_prompt_tokens"].is_number_integer()) {
    limit_ = m["max_prompt_tokens"].get<int>();
  }
  if (m.contains("max_model_len") && m["max_model_len"].is_number_integer()) {
    max_model_len_ = m["max_model_len"].get<int>();
    if (limit_ == 0) limit_ = max_model_len_;
  }
  return absl::OkStatus();
}

absl::Status Campaign::Calibrate() {
  const AuditTenant& t = o_.tenants[0];
  // Golden answers, alone, twice each: compared exactly if the target
  // repeats itself when nothing else runs, else judged by rate.
  for (int v = 0; v < kGoldenVariants; ++v) {
    const std::string prompt = canaries::GoldenPrompt(v);
    Completion a = CompleteAlone(t, prompt, kGoldenMaxTokens, false);
    Completion b = CompleteAlone(t, prompt, kGoldenMaxTokens, false);
    if (!a.usable) {
      return absl::FailedPreconditionError(absl::StrCat(
          "target ", o_.target, " did not answer a golden probe alone (HTTP ",
          a.status, "): ", a.error.message()));
    }
    golden_[v] = a.text;
    if (!b.usable || a.text != b.text) golden_by_rate_.insert(v);
  }
  const int exact = kGoldenVariants - static_cast<int>(golden_by_rate_.size());
  result_.detectors["golden"] = absl::StrCat(
      "active (", exact, " variants exact",
      golden_by_rate_.empty()
          ? ""
          : absl::StrCat(", ", golden_by_rate_.size(),
                         " by divergence rate: cross-tenant vs same-tenant "
                         "load"),
      ")");
  // Echo: per tenant, the first of a few nonces the model repeats when
  // alone (a small model copies some words and not others); a tenant with
  // none gets no echo probes.
  {
    int echoing = 0;
    for (size_t i = 0; i < o_.tenants.size(); ++i) {
      for (int k = 0; k < kNonceCandidates && !echo_ok_[i]; ++k) {
        const canaries::Marker nonce =
            canaries::DeriveNonce(key_, o_.tenants[i].name, id_, k);
        Completion c = CompleteAlone(o_.tenants[i], canaries::EchoPrompt(nonce),
                                     kEchoMaxTokens, false);
        if (c.usable &&
            !CheckEcho(nonce, c.text, o_.tenants[i].name).has_value()) {
          nonces_[i] = nonce;
          echo_ok_[i] = true;
        }
      }
      echoing += echo_ok_[i];
    }
    echo_ = echoing > 0;
    result_.detectors["echo"] =
        echo_ ? absl::StrCat("active (", echoing, " of ", o_.tenants.size(),
                             " tenants)")
              : "disabled: the model does not echo a nonce alone";
  }
  // Prompt tokens per boundary unit: must be exactly linear.
  {
    int tokens[3];
    bool ok = true;
    for (int i = 0; i < 3; ++i) {
      Completion c = CompleteAlone(t, BoundaryPrompt(i + 1), 1, false);
      ok = ok && c.usable && c.prompt_tokens > 0;
      tokens[i] = c.prompt_tokens;
    }
    if (ok && tokens[1] - tokens[0] == tokens[2] - tokens[1] &&
        tokens[1] > tokens[0] && limit_ > 0) {
      unit_tokens_ = tokens[1] - tokens[0];
      unit_base_ = tokens[0] - unit_tokens_;
      at_limit_units_ = (limit_ - unit_base_) / unit_tokens_;
      past_limit_units_ = at_limit_units_ + 2;
      const int past = unit_base_ + past_limit_units_ * unit_tokens_;
      if (max_model_len_ > 0 && past + 1 > max_model_len_) {
        past_limit_units_ = 0;  // past the context too: not the input limit
      }
      result_.detectors["boundary"] =
          absl::StrCat("active (limit ", limit_, " tokens, ", unit_tokens_,
                       " tokens per unit)");
    } else {
      result_.detectors["boundary"] =
          limit_ > 0
              ? "disabled: prompt_tokens not linear in the prompt"
              : "disabled: no advertised input limit (--max-prompt-tokens)";
    }
  }
  // Latency: first token alone for a short and a long prompt.
  if (unit_tokens_ > 0 && at_limit_units_ > 1) {
    std::vector<double> short_ms, long_ms;
    for (int i = 0; i < 5; ++i) {
      Completion s = CompleteAlone(t, BoundaryPrompt(1), 1, true);
      Completion l = CompleteAlone(t, BoundaryPrompt(at_limit_units_), 1, true);
      if (s.usable) short_ms.push_back(s.ttft_ms);
      if (l.usable) long_ms.push_back(l.ttft_ms);
    }
    if (short_ms.size() >= 3 && long_ms.size() >= 3) {
      std::sort(short_ms.begin(), short_ms.end());
      std::sort(long_ms.begin(), long_ms.end());
      const double med_s = short_ms[short_ms.size() / 2];
      const double med_l = long_ms[long_ms.size() / 2];
      latency_.base_ms = short_ms[0];
      latency_.per_token_ms = std::max(
          0.0, (med_l - med_s) / ((at_limit_units_ - 1) * unit_tokens_));
      latency_.calibrated = true;
    }
  }
  result_.detectors["latency"] =
      latency_.calibrated
          ? absl::StrCat("active (", latency_.per_token_ms * 1000,
                         " us per prompt token)")
          : "disabled: not calibrated";
  result_.detectors["output_scan"] =
      absl::StrCat("active (", scanner_.size(), " markers)");
  result_.detectors["trace"] =
      followers_.empty()
          ? "disabled: no --trace node"
          : absl::StrCat("active (", followers_.size(), " nodes)");
  json body = json::object();
  for (const auto& [d, s] : result_.detectors) body[d] = s;
  return Record("calibration", body, true);
}

absl::Status Campaign::MainLoop() {
  // The probe pattern: plants and sniffs interleaved across tenants so one
  // tenant's freed pages go to the next, with golden, echo and boundary
  // probes mixed in.
  static const char* kPattern[] = {"plant",  "sniff", "plant", "sniff",
                                   "golden", "echo",  "plant", "sniff",
                                   "sniff",  "plant", "sniff", "boundary"};
  constexpr int kPatternSize = sizeof(kPattern) / sizeof(kPattern[0]);
  struct InFlight {
    std::string kind;
    int tenant = 0;
    bool stream = false;
    int golden_variant = -1;
    bool baseline = false;  // sent in the same-tenant baseline phase
    int predicted_tokens = 0;
    std::vector<std::string> marker_ids;
    std::string prompt_sha;
  };
  std::map<uint64_t, InFlight> in_flight;
  const auto start = Clock::now();
  const auto deadline = start + absl::ToChronoMilliseconds(o_.duration);
  uint64_t next_id = 0;
  int boundary_turn = 0;
  std::vector<int> plant_counter(o_.tenants.size(), 0);
  auto last_progress = start;
  absl::Status error;
  auto done = [&] {
    return !error.ok() || Clock::now() >= deadline ||
           (o_.max_probes > 0 &&
            next_id >= static_cast<uint64_t>(o_.max_probes));
  };
  MultiClient client(o_.concurrency);
  client.Run(
      [&]() -> std::optional<ProbeRequest> {
        if (done()) return std::nullopt;
        const double elapsed_s =
            std::chrono::duration<double>(Clock::now() - start).count();
        if (next_id >= o_.max_rate * elapsed_s + 1) return std::nullopt;
        InFlight f;
        // Shifted every round of the pattern, so every tenant gets every
        // kind of probe whatever the number of tenants.
        f.tenant = static_cast<int>((next_id + next_id / kPatternSize) %
                                    o_.tenants.size());
        // The same-tenant baseline for golden rates: the first quarter.
        f.baseline = !golden_by_rate_.empty() && InBaseline(next_id, start);
        if (f.baseline) f.tenant = 0;
        std::string kind = kPattern[next_id % kPatternSize];
        if (kind == "golden" && golden_.empty()) kind = "sniff";
        // Rates need samples: half the sniffs become golden probes (they
        // are scanned for markers all the same).
        if (kind == "sniff" && !golden_by_rate_.empty() && next_id % 2 == 0) {
          kind = "golden";
        }
        if (kind == "echo" && !echo_ok_[f.tenant]) kind = "plant";
        if (kind == "boundary" && unit_tokens_ == 0) kind = "sniff";
        f.kind = kind;
        const AuditTenant& t = o_.tenants[f.tenant];
        std::string prompt;
        int max_tokens = kSniffMaxTokens;
        if (kind == "plant") {
          std::vector<canaries::Marker> ms;
          for (int k = 0; k < kMarkersPerPlant; ++k) {
            const auto& pool = markers_[f.tenant];
            ms.push_back(pool[plant_counter[f.tenant]++ % pool.size()]);
            f.marker_ids.push_back(ms.back().id);
          }
          prompt = canaries::PlantPrompt(ms);
          max_tokens = kPlantMaxTokens;
        } else if (kind == "sniff") {
          prompt = canaries::SniffPrompt(next_id);
        } else if (kind == "golden") {
          auto it = golden_.begin();
          std::advance(it, next_id % golden_.size());
          f.golden_variant = it->first;
          prompt = canaries::GoldenPrompt(it->first);
          max_tokens = kGoldenMaxTokens;
        } else if (kind == "echo") {
          prompt = canaries::EchoPrompt(nonces_[f.tenant]);
          f.marker_ids.push_back(nonces_[f.tenant].id);
          max_tokens = kEchoMaxTokens;
        } else {  // boundary: at the limit, past it, past it streamed
          const int turn = boundary_turn++ % 3;
          const int units = turn == 0 || past_limit_units_ == 0
                                ? at_limit_units_
                                : past_limit_units_;
          f.predicted_tokens = unit_base_ + units * unit_tokens_;
          f.stream = turn == 2;
          prompt = BoundaryPrompt(units);
          // A few decode steps: a prompt whose pages were never filled is
          // read by decode, not just prefilled.
          max_tokens = kBoundaryMaxTokens;
        }
        f.prompt_sha = Sha256Hex(prompt);
        ProbeRequest r;
        r.id = next_id++;
        r.url = o_.target + "/v1/completions";
        r.body = Body(prompt, max_tokens, f.stream);
        r.headers = Headers(t);
        r.timeout = o_.request_timeout;
        in_flight[r.id] = std::move(f);
        return r;
      },
      [&](ProbeResponse r) {
        InFlight f = std::move(in_flight[r.id]);
        in_flight.erase(r.id);
        const AuditTenant& t = o_.tenants[f.tenant];
        const Completion c = ParseCompletion(r, f.stream);
        const std::string outcome = Outcome(c);
        ++result_.probes;
        metrics_->CountProbe(f.kind, outcome);
        const bool expected_refusal = f.kind == "boundary" &&
                                      f.predicted_tokens > limit_ &&
                                      c.status == 400;
        if (!c.usable && !expected_refusal && outcome != "http_4xx") {
          ++result_.probe_errors;
        }
        json probe = {{"probe", r.id},
                      {"kind", f.kind},
                      {"tenant", t.name},
                      {"outcome", outcome},
                      {"http_status", c.status},
                      {"ms", c.total_ms},
                      {"prompt_sha256", f.prompt_sha},
                      {"markers", f.marker_ids}};
        if (c.usable) {
          probe["output_sha256"] = Sha256Hex(c.text);
          probe["prompt_tokens"] = c.prompt_tokens;
          if (f.stream) probe["ttft_ms"] = c.ttft_ms;
        }
        absl::Status s = Record("probe", std::move(probe));
        std::vector<Finding> found;
        if (c.usable) {
          found = ScanOutput(scanner_, c.text, t.name, f.kind);
          if (f.kind == "golden") {
            auto g = CompareGolden(f.golden_variant, golden_[f.golden_variant],
                                   c.text, t.name);
            if (golden_by_rate_.count(f.golden_variant)) {
              // Judged by rate at the end; only a divergence holding a
              // foreign marker is a finding by itself.
              (f.baseline ? base_n_ : cross_n_)++;
              if (g.has_value()) (f.baseline ? base_div_ : cross_div_)++;
              if (found.empty()) g.reset();
            }
            if (g.has_value()) {
              // A divergence holding a foreign marker is the leak itself.
              if (!found.empty()) g->severity = Severity::kCritical;
              found.push_back(*std::move(g));
            }
          } else if (f.kind == "echo") {
            auto e = CheckEcho(nonces_[f.tenant], c.text, t.name);
            if (e.has_value()) found.push_back(*std::move(e));
          }
        }
        if (f.kind == "boundary") {
          BoundaryObservation o{f.predicted_tokens, limit_, c.status,
                                c.usable ? c.prompt_tokens : -1, t.name};
          for (Finding& b : JudgeBoundary(o)) found.push_back(std::move(b));
          if (f.stream && c.usable) {
            auto l =
                JudgeLatency(latency_, f.predicted_tokens, c.ttft_ms, t.name);
            if (l.has_value()) found.push_back(*std::move(l));
          }
        }
        for (Finding& x : found) {
          x.detail["probe"] = r.id;
          if (s.ok()) s = AddFinding(std::move(x));
        }
        if (!s.ok() && error.ok()) error = s;
        if (Clock::now() - last_progress > std::chrono::seconds(2)) {
          last_progress = Clock::now();
          Progress("running");
        }
      },
      done);
  RETURN_IF_ERROR(error);
  if (!golden_by_rate_.empty()) {
    auto g = JudgeGoldenRates(base_div_, base_n_, cross_div_, cross_n_);
    if (g.has_value()) RETURN_IF_ERROR(AddFinding(*std::move(g)));
  }
  return Flush();
}

bool Campaign::InBaseline(uint64_t probe, Clock::time_point start) const {
  if (o_.max_probes > 0) {
    return probe < static_cast<uint64_t>(o_.max_probes) / 4;
  }
  return Clock::now() - start < absl::ToChronoMilliseconds(o_.duration) / 4;
}

absl::Status Campaign::QuietProbes() {
  if (unit_tokens_ == 0 || past_limit_units_ == 0) return absl::OkStatus();
  const int predicted = unit_base_ + past_limit_units_ * unit_tokens_;
  for (int i = 0; i < 3; ++i) {
    const AuditTenant& t = o_.tenants[i % o_.tenants.size()];
    const std::string prompt = BoundaryPrompt(past_limit_units_);
    const Completion c = CompleteAlone(t, prompt, kBoundaryMaxTokens, true);
    ++result_.probes;
    const std::string outcome = Outcome(c);
    metrics_->CountProbe("quiet_boundary", outcome);
    if (!c.usable && c.status != 400 && outcome != "http_4xx") {
      ++result_.probe_errors;
    }
    json probe = {{"probe", "quiet-" + std::to_string(i)},
                  {"kind", "quiet_boundary"},
                  {"tenant", t.name},
                  {"outcome", outcome},
                  {"http_status", c.status},
                  {"ms", c.total_ms},
                  {"prompt_sha256", Sha256Hex(prompt)}};
    if (c.usable) {
      probe["ttft_ms"] = c.ttft_ms;
      probe["prompt_tokens"] = c.prompt_tokens;
      probe["output_sha256"] = Sha256Hex(c.text);
    }
    RETURN_IF_ERROR(Record("probe", std::move(probe)));
    std::vector<Finding> found;
    BoundaryObservation o{predicted, limit_, c.status,
                          c.usable ? c.prompt_tokens : -1, t.name};
    for (Finding& b : JudgeBoundary(o)) found.push_back(std::move(b));
    if (c.usable) {
      auto l = JudgeLatency(latency_, predicted, c.ttft_ms, t.name);
      if (l.has_value()) found.push_back(*std::move(l));
    }
    for (Finding& f : found) {
      f.detail["probe"] = "quiet-" + std::to_string(i);
      RETURN_IF_ERROR(AddFinding(std::move(f)));
    }
  }
  return Flush();
}

absl::StatusOr<CampaignResult> Campaign::Run() {
  const auto start = Clock::now();
  if (o_.tenants.size() < 2) {
    return absl::InvalidArgumentError("a campaign needs at least two tenants");
  }
  if (o_.concurrency < 1 || o_.max_rate <= 0) {
    return absl::InvalidArgumentError(
        "--concurrency must be >= 1 and --rate > 0");
  }
  id_ = absl::StrCat(
      "c", absl::FormatTime("%Y%m%dT%H%M%S", absl::Now(), absl::UTCTimeZone()),
      "-", RandomHex(4));
  result_.campaign_id = id_;
  ASSIGN_OR_RETURN(store_, storage::EvidenceStore::Open(o_.db_path));
  // Positive controls first: a detector that cannot fire proves nothing.
  result_.positive_controls = RunPositiveControls();
  bool controls_ok = true;
  for (const auto& [d, fired] : result_.positive_controls) {
    metrics_->SetPositiveControl(d, fired);
    controls_ok = controls_ok && fired;
  }
  RETURN_IF_ERROR(Record("campaign_start",
                         {{"target", o_.target},
                          {"tenants",
                           [&] {
                             json a = json::array();
                             for (const AuditTenant& t : o_.tenants)
                               a.push_back(t.name);
                             return a;
                           }()},
                          {"trace_nodes", o_.trace_urls},
                          {"duration_s", absl::ToDoubleSeconds(o_.duration)},
                          {"max_probes", o_.max_probes},
                          {"concurrency", o_.concurrency},
                          {"rate", o_.max_rate},
                          {"key_sha256", Sha256Hex(key_)}}));
  {
    json pc = json::object();
    for (const auto& [d, fired] : result_.positive_controls) pc[d] = fired;
    RETURN_IF_ERROR(Record("positive_control", pc, true));
  }
  if (!controls_ok) {
    return absl::InternalError(
        "a positive control failed: a detector did not fire on input it "
        "must flag; nothing this campaign could say would be trustworthy");
  }
  RETURN_IF_ERROR(Discover());
  // The registry of active markers: a pool per tenant, and a nonce each.
  for (size_t i = 0; i < o_.tenants.size(); ++i) {
    markers_.emplace_back();
    for (int k = 0; k < kMarkersPerTenant; ++k) {
      markers_[i].push_back(
          canaries::DeriveMarker(key_, o_.tenants[i].name, id_, k));
      scanner_.Add(markers_[i].back(), o_.tenants[i].name);
    }
    nonces_.push_back(canaries::DeriveNonce(key_, o_.tenants[i].name, id_, 0));
    echo_ok_.push_back(false);
  }
  RETURN_IF_ERROR(scanner_.Compile());
  for (const std::string& url : o_.trace_urls) {
    followers_.push_back(std::make_unique<TraceFollower>(url));
    RETURN_IF_ERROR(followers_.back()->Start());
  }
  RETURN_IF_ERROR(Calibrate());
  Progress("calibrated");
  RETURN_IF_ERROR(MainLoop());
  RETURN_IF_ERROR(QuietProbes());
  // The trace detector: what each node's shadow ledger found.
  for (auto& follower : followers_) {
    absl::Status s = follower->Stop();
    const LedgerStats st = follower->stats();
    result_.trace_events += st.events;
    result_.trace_dropped += st.dropped;
    metrics_->CountTraceEvents(static_cast<double>(st.events),
                               static_cast<double>(st.dropped));
    for (const LedgerFinding& lf : follower->findings()) {
      Finding f = FromLedger(lf);
      f.detail["trace_url"] = follower->url();
      RETURN_IF_ERROR(AddFinding(std::move(f)));
    }
    if (!s.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "trace stream of ", follower->url(), " broke: ", s.message()));
    }
  }
  result_.elapsed = absl::FromChrono(Clock::now() - start);
  json by_kind = json::object();
  for (const Finding& f : result_.findings) {
    by_kind[f.kind] = by_kind.value(f.kind, 0) + 1;
  }
  const bool usable =
      result_.probes > 0 && result_.probe_errors * 2 <= result_.probes;
  RETURN_IF_ERROR(
      Record("campaign_end",
             {{"probes", result_.probes},
              {"probe_errors", result_.probe_errors},
              {"findings", result_.findings.size()},
              {"findings_by_kind", by_kind},
              {"trace_events", result_.trace_events},
              {"trace_dropped", result_.trace_dropped},
              {"elapsed_ms", absl::ToDoubleMilliseconds(result_.elapsed)},
              {"result", usable ? "completed" : "error"}},
             true));
  Progress("done");
  if (!usable) {
    return absl::UnavailableError(
        absl::StrCat(result_.probe_errors, " of ", result_.probes,
                     " probes got no usable answer from ", o_.target,
                     ": the campaign cannot vouch for the target"));
  }
  return result_;
}

}  // namespace

absl::StatusOr<CampaignResult> RunCampaign(const CampaignOptions& options,
                                           AuditorMetrics* metrics) {
  Campaign c(options, metrics);
  auto result = c.Run();
  metrics->CampaignEnded(
      result.ok() ? absl::ToDoubleSeconds(result->elapsed) : 0, result.ok(),
      absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  return result;
}

}  // namespace kvcanary::auditor
