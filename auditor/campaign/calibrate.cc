#include "auditor/campaign/calibrate.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "auditor/calibration/latency_fit.h"
#include "auditor/campaign/plant_calibration.h"
#include "auditor/detectors/boundary.h"
#include "auditor/detectors/echo.h"
#include "canaries/templates.h"
#include "common/sha256.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

// At-limit probes of a target whose limit was not found stay this short:
// long enough to time a prefill, short enough to send hundreds of.
constexpr int kUnboundedAtLimitTokens = 2048;

class Calibrator {
 public:
  Calibrator(const CalibrationOptions& o, const SendAlone& send)
      : o_(o), send_(send) {}

  Calibration Run() {
    c_.nonces.assign(o_.tenants.size(), std::nullopt);
    c_.plants.assign(o_.tenants.size(), {});
    Units();
    Limit();
    Echo();
    Golden();
    Plants();
    Latency();
    return std::move(c_);
  }

 private:
  Completion Send(const AuditTenant& t, const std::string& prompt,
                  int max_tokens, bool stream) {
    ++c_.requests;
    return send_(t, prompt, max_tokens, stream);
  }
  const AuditTenant& first() const { return o_.tenants[0]; }

  // Prompt tokens per boundary unit: must be linear in the units. Five
  // prefixes of one unit show how much a unique prefix's count varies; the
  // tolerance is twice what was seen.
  void Units() {
    constexpr int kSamples = 5;
    int one[kSamples];
    for (int i = 0; i < kSamples; ++i) {
      const Completion c =
          Send(first(), BoundaryPrompt(buster_.Next(), 1), 1, false);
      one[i] = c.usable ? c.prompt_tokens : -1;
    }
    const Completion two =
        Send(first(), BoundaryPrompt(buster_.Next(), 2), 1, false);
    const Completion three =
        Send(first(), BoundaryPrompt(buster_.Next(), 3), 1, false);
    std::sort(one, one + kSamples);
    if (one[0] <= 0 || !two.usable || !three.usable || two.prompt_tokens <= 0 ||
        three.prompt_tokens <= 0) {
      c_.boundary_failure =
          "the target reported no usage.prompt_tokens for short prompts";
      return;
    }
    c_.tolerance = 2 * (one[kSamples - 1] - one[0]);
    const int median = one[kSamples / 2];
    const int unit = three.prompt_tokens - two.prompt_tokens;
    if (unit <= 0 ||
        std::abs(two.prompt_tokens - median - unit) > c_.tolerance) {
      c_.boundary_failure = absl::StrFormat(
          "usage.prompt_tokens is not linear in the prompt (%d, %d, %d for 1, "
          "2, 3 units)",
          median, two.prompt_tokens, three.prompt_tokens);
      return;
    }
    c_.unit_tokens = unit;
    c_.base_tokens = median - unit;
    if (unit == 1) return;  // units alone hit every length
    // A one-token pad word, so the limit can be measured to the token.
    for (const std::string& pad : PadCandidates()) {
      if (CountPadWorks(pad, unit, buster_.Next(),
                        [this](const std::string& p) {
                          const Completion c = Send(first(), p, 1, false);
                          return c.usable ? c.prompt_tokens : -1;
                        })) {
        c_.pad = pad;
        return;
      }
    }
  }

  void Limit() {
    if (o_.flag_limit > 0) {
      c_.limit.prompt_tokens = c_.limit.refuse_above = o_.flag_limit;
      c_.limit.source = "flag";
      c_.limit.where = "--max-prompt-tokens";
    } else if (o_.advertised.prompt_tokens > 0) {
      c_.limit = o_.advertised;
    } else if (c_.unit_tokens > 0) {
      Ladder();
    } else {
      c_.limit.source = "unknown";
      c_.limit.where = "not advertised, and not measurable without counts";
    }
    if (c_.unit_tokens == 0) return;
    int limit = c_.limit.prompt_tokens;
    if (limit <= 0) {
      // Not bounded below the ladder's ceiling: probes stay moderate and
      // nothing can be judged past a limit.
      limit = std::min(o_.max_ladder_tokens, kUnboundedAtLimitTokens);
      if (c_.boundary_failure.empty()) {
        c_.boundary_failure =
            absl::StrCat("no input limit: ", c_.limit.where,
                         " (state it with --max-prompt-tokens)");
      }
    }
    // Within the limit even if this prefix counts `tolerance` more.
    c_.at_limit_units =
        std::max(0, (limit - c_.tolerance - c_.base_tokens) / c_.unit_tokens);
    if (c_.limit.refuse_above > 0) {
      // Two units past: clear of any tolerance in the counts.
      c_.past_limit_units =
          (c_.limit.refuse_above + c_.tolerance - c_.base_tokens) /
              c_.unit_tokens +
          2;
    }
  }

  // The limit measured (auditor/target/limits.h): whole up to the lower
  // bound, refused or cut from the upper, both re-checked; count prompts
  // built to the token where a pad word exists.
  void Ladder() {
    LimitMeasureOptions mo;
    mo.shortest_tokens = c_.base_tokens;
    mo.grain_tokens = c_.unit_tokens;
    mo.tolerance = c_.tolerance;
    mo.max_tokens = o_.max_ladder_tokens;
    LadderResult r = MeasureLimit(
        [this](int tokens) {
          LadderStep s;
          const std::optional<CountFill> f =
              CountFillFor(c_.base_tokens, c_.unit_tokens, c_.pad, tokens);
          if (!f.has_value()) {
            s.predicted = -1;
            return s;
          }
          s.predicted = f->predicted;
          const Completion c =
              Send(first(), CountPrompt(buster_.Next(), *f, c_.pad),
                   kBoundaryMaxTokens, false);
          s.answer = {c.status, c.usable ? c.prompt_tokens : -1};
          return s;
        },
        mo);
    c_.limit.source = r.found ? "measured" : "unknown";
    c_.limit.where = absl::StrCat("ladder: ", r.how);
    // Measured with the boundary probes' own tokens to generate: the same
    // prompts past it are refused (or cut) again.
    if (r.found) {
      c_.limit.prompt_tokens = r.limit;
      c_.limit.refuse_above = r.upper - 1;
    }
    if (r.truncates) {
      BoundaryObservation obs;
      obs.predicted_prompt_tokens = r.truncated.predicted;
      obs.limit = 0;  // not judged against a limit: the cut is the finding
      obs.http_status = 200;
      obs.reported_prompt_tokens = r.truncated.answer.prompt_tokens;
      obs.tolerance = c_.tolerance;
      obs.tenant = first().name;
      obs.template_name = "ladder";
      for (Finding& f : JudgeBoundary(obs)) c_.findings.push_back(std::move(f));
    }
    c_.ladder = std::move(r);
  }

  void Golden() {
    c_.golden_prefix = buster_.Next();
    for (int v = 0; v < kGoldenVariants; ++v) {
      const std::string prompt = c_.GoldenPromptOf(v);
      const Completion a = Send(first(), prompt, kGoldenMaxTokens, false);
      const Completion b = Send(first(), prompt, kGoldenMaxTokens, false);
      if (!a.usable) {
        c_.golden_failure =
            absl::StrCat("golden variant ", v,
                         " got no usable answer alone (HTTP ", a.status, ")");
        c_.golden.clear();
        return;
      }
      // One failed second answer is not proof of nondeterminism: retried.
      Completion second =
          b.usable ? b : Send(first(), prompt, kGoldenMaxTokens, false);
      if (!second.usable) {
        c_.golden_failure = absl::StrCat(
            "golden variant ", v,
            " got one usable answer alone of three (HTTP ", second.status, ")");
        c_.golden.clear();
        c_.golden_by_rate.clear();
        return;
      }
      c_.golden[v] = a.text;
      if (a.prompt_tokens > 0) c_.golden_tokens[v] = a.prompt_tokens;
      if (a.text != second.text) {
        c_.golden_by_rate.insert(v);
      } else if (!SameUnderLoad(prompt, a.text)) {
        c_.golden_by_rate.insert(v);
        c_.golden_moved_under_load.insert(v);
      }
    }
    bool any_text = false;
    for (const auto& [v, text] : c_.golden)
      any_text = any_text || !text.empty();
    if (!any_text) {
      // Identical empty answers compare equal under any load.
      c_.golden_failure =
          "the target answered every golden prompt alone with no text";
      c_.golden.clear();
      c_.golden_by_rate.clear();
    }
  }

  // Whether `prompt` gets `alone` twice with the load's batch shapes (both
  // usable); true where there is no way to send so.
  bool SameUnderLoad(const std::string& prompt, const std::string& alone) {
    if (!o_.send_loaded) return true;
    for (int i = 0; i < 2; ++i) {
      ++c_.requests;
      const Completion c =
          o_.send_loaded(first(), prompt, kGoldenMaxTokens, nullptr);
      if (!c.usable || c.text != alone) return false;
    }
    return true;
  }

  // Whether tenant i's nonce k echoes alone in `wording`; sets the nonce.
  bool Echoes(size_t i, int k, canaries::Wording wording, bool* any_text) {
    const canaries::Marker nonce = canaries::DeriveNonce(
        o_.secret_key, o_.tenants[i].name, o_.campaign_id, k);
    const Completion c =
        Send(o_.tenants[i], canaries::EchoPrompt(nonce, wording),
             kEchoMaxTokens, false);
    *any_text = *any_text || (c.usable && !c.text.empty());
    if (!c.usable || CheckEcho(nonce, c.text, o_.tenants[i].name)) {
      return false;
    }
    c_.nonces[i] = nonce;
    return true;
  }

  // The first tenant picks the wording: story, then (chat) instruct where
  // no story nonce echoed; the others try theirs in it.
  void Echo() {
    using canaries::Wording;
    int echoing = 0;
    bool any_text = false;
    std::vector<Wording> wordings = {Wording::kStory};
    if (o_.chat) wordings.push_back(Wording::kInstruct);
    for (Wording w : wordings) {
      for (int k = 0; k < o_.nonce_candidates && !c_.nonces[0]; ++k) {
        if (Echoes(0, k, w, &any_text)) c_.wording = w;
      }
    }
    for (size_t i = 0; i < o_.tenants.size(); ++i) {
      for (int k = 0; k < o_.nonce_candidates && !c_.nonces[i]; ++k) {
        Echoes(i, k, c_.wording, &any_text);
      }
      echoing += c_.nonces[i].has_value();
    }
    // Disabled only for a model that writes text without the nonce; one
    // that writes nothing at all has not shown what it does.
    if (echoing == 0 && any_text) {
      c_.echo_disabled = absl::StrCat(
          "the model does not echo a nonce alone (", o_.nonce_candidates,
          " tried per tenant",
          o_.chat ? "; the first also told to repeat it exactly" : "", ")");
    } else if (echoing == 0) {
      c_.echo_failure = "the target answered every echo prompt with no text";
    }
  }

  // The input limit plants are sized to; 0 if there is none.
  int PlantLimit() const {
    if (c_.limit.prompt_tokens > 0) return c_.limit.prompt_tokens;
    return c_.ladder.has_value() && !c_.ladder->found
               ? std::min(o_.max_ladder_tokens, kUnboundedAtLimitTokens)
               : 0;
  }

  void Plants() {
    const int limit = PlantLimit();
    if (limit <= 0) {
      c_.plant_failure = "no input limit to size plants to";
      return;
    }
    CalibratePlants(
        o_, limit,
        [this](const AuditTenant& t, const std::string& prompt, int max_tokens,
               bool stream) { return Send(t, prompt, max_tokens, stream); },
        &c_);
  }

  void Latency() {
    if (c_.unit_tokens == 0 || c_.at_limit_units < 3) {
      c_.latency.failure =
          c_.unit_tokens == 0
              ? "no prompt token counts to calibrate against"
              : "the limit leaves fewer than 3 prompt lengths to calibrate on";
      return;
    }
    const int at = c_.at_limit_units;
    int cached = 0, sent = 0;
    std::vector<int> lengths = {1, at / 3, 2 * at / 3, at};
    lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
    auto rounds = [&] {
      for (int round = 0; round < o_.latency_rounds; ++round) {
        for (int units : lengths) {
          const Completion c =
              Send(first(), BoundaryPrompt(buster_.Next(), units), 1, true);
          ++sent;
          if (!c.usable || c.prompt_tokens <= 0) continue;
          // A unique prefix should leave nothing to a cache; a target that
          // says otherwise did not prefill what is being timed.
          if (c.cached_tokens > 0) {
            ++cached;
            continue;
          }
          c_.latency_samples.push_back({c.prompt_tokens, c.ttft_ms});
        }
      }
      c_.latency = FitLatency(c_.latency_samples);
    };
    rounds();
    // A busy machine can bury one set of rounds in noise: a second set,
    // fitted with the first, before the calibration is called failed.
    if (!c_.latency.calibrated && cached * 2 <= sent) rounds();
    if (cached * 2 > sent) {
      c_.latency.calibrated = false;
      c_.latency.failure =
          absl::StrCat("calibration served from a cache: ", cached,
                       " cache-busted prompts reported cached tokens");
    }
  }

  const CalibrationOptions& o_;
  const SendAlone& send_;
  CacheBuster buster_;
  Calibration c_;
};

}  // namespace

canaries::Marker PlantMarker(absl::string_view secret_key,
                             absl::string_view tenant,
                             absl::string_view campaign, int counter) {
  return canaries::DeriveMarker(secret_key, tenant, campaign, counter);
}

Calibration Calibrate(const CalibrationOptions& options,
                      const SendAlone& send) {
  return Calibrator(options, send).Run();
}

}  // namespace kvcanary::auditor
