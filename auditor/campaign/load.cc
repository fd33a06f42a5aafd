// The campaign's load (Campaign, campaign_internal.h): the mix of probe
// kinds per tenant the detectors' floors call for, the main loop that
// sends it at the rate for the duration (the rate cut, and probes sent
// again, while the target answers 429/503; new ones stopped by the token
// budget), and the timed pairs after it.
#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "auditor/campaign/campaign_internal.h"
#include "auditor/campaign/probe_mix.h"
#include "auditor/target/multi_client.h"
#include "auditor/target/rate_limit.h"
#include "common/random.h"
#include "common/status_macros.h"

namespace kvcanary::auditor::campaign_internal {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

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
  // Each request in flight, to send again after a 429/503 (rate_limit.h).
  std::map<uint64_t, ProbeRequest> requests;
  struct Retry {
    absl::Time at;  // not before
    Probe probe;
    ProbeRequest request;
    Completion last;  // its rate-limited answer
  };
  std::vector<Retry> retries;       // waiting for their time
  std::map<uint64_t, int> retried;  // probe id -> times sent again
  const auto start = Clock::now();
  const auto deadline = start + absl::ToChronoMilliseconds(o_.duration);
  const absl::Time deadline_at = absl::Now() + o_.duration;
  SendRate rate(o_.max_rate, absl::Now());
  uint64_t sent = 0;
  auto last_progress = start;
  absl::Status error;
  bool budget_stop = false;
  auto in_baseline = [&] {
    if (!rate_mode) return false;
    if (o_.max_probes > 0) {
      return sent < static_cast<uint64_t>(o_.max_probes) / 4;
    }
    return Clock::now() - start < absl::ToChronoMilliseconds(o_.duration) / 4;
  };
  // Nothing more to send, retries left waiting abandoned.
  auto over = [&] {
    return !error.ok() || !session_.down().ok() || budget_stop ||
           Clock::now() >= deadline;
  };
  auto no_new = [&] {
    return over() ||
           (o_.max_probes > 0 && sent >= static_cast<uint64_t>(o_.max_probes));
  };
  // Within the budget with `more` requests beside those in flight or
  // waiting; else, once none is left, the budget stops the load.
  auto affordable = [&](int more) {
    const int pending = static_cast<int>(in_flight.size() + retries.size());
    if (session_.spend().Affordable(pending + more)) return true;
    if (pending == 0) {
      budget_stop = true;
      session_.spend().NoteStopped();
    }
    return false;
  };
  MultiClient client(o_.concurrency);
  client.Run(
      [&]() -> std::optional<ProbeRequest> {
        if (over()) return std::nullopt;
        const absl::Time now = absl::Now();
        auto due = std::find_if(retries.begin(), retries.end(),
                                [&](const Retry& r) { return r.at <= now; });
        if (due != retries.end()) {
          if (!rate.MaySend(now)) return std::nullopt;
          Retry r = std::move(*due);
          retries.erase(due);
          const uint64_t id = static_cast<uint64_t>(r.probe.id);
          session_.NoteRetry(o_.tenants[r.probe.tenant]);
          in_flight[id] = std::move(r.probe);
          requests[id] = r.request;
          return r.request;
        }
        if (no_new() || !affordable(1) || !rate.MaySend(now)) {
          return std::nullopt;
        }
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
        requests[static_cast<uint64_t>(p.id)] = r;
        in_flight[static_cast<uint64_t>(p.id)] = std::move(p);
        return r;
      },
      [&](ProbeResponse resp) {
        Probe p = std::move(in_flight[resp.id]);
        in_flight.erase(resp.id);
        ProbeRequest request = std::move(requests[resp.id]);
        requests.erase(resp.id);
        const Completion c = session_.Parse(resp, p.stream);
        session_.Note(o_.tenants[p.tenant], c);
        // A provider's "slow down": the rate cut, the probe sent again
        // after its wait, never judged (Judge records it if it gives up).
        if (IsRateLimited(c)) {
          const absl::Time now = absl::Now();
          int& n = retried[resp.id];
          const absl::Duration wait = RetryWait(c, n);
          rate.RateLimited();
          if (n < kMaxRateLimitRetries && now + wait < deadline_at) {
            ++n;
            retries.push_back(
                {now + wait, std::move(p), std::move(request), c});
            return;
          }
        } else if (c.status != 0) {
          rate.Answered();
        }
        retried.erase(resp.id);
        absl::Status s = Judge(p, c);
        if (!s.ok() && error.ok()) error = s;
        if (Clock::now() - last_progress > std::chrono::seconds(2)) {
          last_progress = Clock::now();
          Progress("running");
        }
      },
      [&] { return over() || (no_new() && retries.empty()); });
  // Retries the end left waiting: recorded with the answer they had.
  for (const Retry& r : retries) {
    absl::Status s = Judge(r.probe, r.last);
    if (!s.ok() && error.ok()) error = s;
  }
  r_.rate_cuts += rate.cuts();
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
      // Both of the pair within the budget, or neither.
      if (!session_.spend().Affordable(2)) {
        session_.spend().NoteStopped();
        return Flush();
      }
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

}  // namespace kvcanary::auditor::campaign_internal
