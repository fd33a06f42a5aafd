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
#include "auditor/target/spend.h"
#include "common/random.h"
#include "common/status_macros.h"

namespace kvcanary::auditor::campaign_internal {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kBaselineSlot(250);

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

namespace {

// The load's probes in flight, and those a 429/503 sent back, each held
// until its wait has passed (rate_limit.h).
class InFlight {
 public:
  void Start(Probe p, const ProbeRequest& r) {
    const uint64_t id = static_cast<uint64_t>(p.id);
    requests_[id] = r;
    probes_[id] = std::move(p);
  }
  // The probe `id` answered, and its request, no longer in flight.
  std::pair<Probe, ProbeRequest> Finish(uint64_t id) {
    std::pair<Probe, ProbeRequest> out = {std::move(probes_[id]),
                                          std::move(requests_[id])};
    probes_.erase(id);
    requests_.erase(id);
    return out;
  }
  // Holds `*p` (moved from) to send again after `c`'s wait; false, `*p`
  // untouched, where its retries are spent or the wait ends after
  // `deadline` (it is then judged as it is).
  bool Hold(std::pair<Probe, ProbeRequest>* p, const Completion& c,
            absl::Time now, absl::Time deadline) {
    const uint64_t id = static_cast<uint64_t>(p->first.id);
    int& n = retried_[id];
    const absl::Duration wait = RetryWait(c, n);
    if (n >= kMaxRateLimitRetries || now + wait >= deadline) {
      retried_.erase(id);
      return false;
    }
    ++n;
    held_.push_back({now + wait, std::move(p->first), std::move(p->second), c});
    return true;
  }
  // Whether a probe sent now would share the target with the other side
  // of golden's baseline: a baseline probe (tenant 0's alone) beside a
  // load probe, or that beside a baseline probe. The sides never overlap,
  // so a bug that mixes concurrent requests cannot reach the baseline at
  // a slot's edge, and each slot starts from an empty target, as the
  // other side's did (batch shapes alike on both sides).
  bool Mixes(bool baseline) const {
    return std::any_of(probes_.begin(), probes_.end(), [&](const auto& p) {
      return p.second.baseline != baseline;
    });
  }
  // A held probe whose wait has passed and that would not mix the
  // baseline's sides, back in flight (its request).
  std::optional<std::pair<const Probe*, ProbeRequest>> Due(absl::Time now) {
    auto due = std::find_if(held_.begin(), held_.end(), [&](const Held& h) {
      return h.at <= now && !Mixes(h.probe.baseline);
    });
    if (due == held_.end()) return std::nullopt;
    Held h = std::move(*due);
    held_.erase(due);
    const uint64_t id = static_cast<uint64_t>(h.probe.id);
    Start(std::move(h.probe), h.request);
    return std::make_pair(&probes_[id], std::move(h.request));
  }
  int pending() const {
    return static_cast<int>(probes_.size() + held_.size());
  }
  // Whether one more request fits in the budget beside those pending;
  // once none is pending and none fits, the budget is spent (stopped()).
  bool Affordable(SpendLedger* spend) const {
    if (spend->Affordable(pending() + 1)) return true;
    if (pending() == 0) spend->NoteStopped();
    return false;
  }
  bool holding() const { return !held_.empty(); }
  // Those still held when the load ended, with the answer each had.
  std::vector<std::pair<Probe, Completion>> TakeHeld() {
    std::vector<std::pair<Probe, Completion>> out;
    for (Held& h : held_) out.emplace_back(std::move(h.probe), h.last);
    held_.clear();
    return out;
  }

 private:
  struct Held {
    absl::Time at;  // not before
    Probe probe;
    ProbeRequest request;
    Completion last;  // its rate-limited answer
  };
  std::map<uint64_t, Probe> probes_;
  std::map<uint64_t, ProbeRequest> requests_;
  std::vector<Held> held_;
  std::map<uint64_t, int> retried_;  // probe id -> times sent again
};

}  // namespace

Probe Campaign::NextLoadProbe(ProbeMix* mix, uint64_t sent, bool baseline) {
  Probe p;
  // Tenants take turns, so pages one frees are reused by the next.
  p.tenant = static_cast<int>(sent % o_.tenants.size());
  // The same-tenant baseline for golden rates and distances: in its
  // slots every probe from tenant 0, of the kinds the load sends, so a
  // target whose answers depend on the batch meets the same batches on
  // both sides.
  p.baseline = baseline;
  if (p.baseline) p.tenant = 0;
  p.kind = mix->Next(p.tenant);
  p.id = next_probe_++;
  return p;
}

absl::Status Campaign::MainLoop() {
  const bool rate_mode = cal_.NeedsGoldenBaseline();
  ProbeMix mix = Mix(rate_mode);
  InFlight flight;
  const auto start = Clock::now();
  const auto deadline = start + absl::ToChronoMilliseconds(o_.duration);
  const absl::Time deadline_at = absl::Now() + o_.duration;
  SendRate rate(o_.max_rate, absl::Now());
  uint64_t sent = 0;
  auto last_progress = start;
  absl::Status error;
  // Golden's same-tenant baseline and the cross-tenant load take turns in
  // slots of kBaselineSlot, so both sides meet the target in the same
  // moments (its warm-up, its queue, whatever else it serves); a slot's
  // probes wait for the other side's to finish (InFlight::Mixes).
  auto in_baseline = [&] {
    return rate_mode && (Clock::now() - start) / kBaselineSlot % 2 == 0;
  };
  // Nothing more to send, probes still held abandoned.
  auto over = [&] {
    return !error.ok() || !session_.down().ok() || session_.spend().stopped() ||
           Clock::now() >= deadline;
  };
  auto no_new = [&] {
    return over() ||
           (o_.max_probes > 0 && sent >= static_cast<uint64_t>(o_.max_probes));
  };
  MultiClient client(o_.concurrency);
  client.Run(
      [&]() -> std::optional<ProbeRequest> {
        const absl::Time now = absl::Now();
        if (over() || (flight.holding() && !rate.MaySend(now))) {
          return std::nullopt;
        }
        if (auto due = flight.Due(now)) {
          session_.NoteRetry(o_.tenants[due->first->tenant]);
          return std::move(due->second);
        }
        const bool baseline = in_baseline();
        if (no_new() || !flight.Affordable(&session_.spend()) ||
            !rate.MaySend(now) || flight.Mixes(baseline)) {
          return std::nullopt;  // asked again in a few milliseconds
        }
        Probe p = NextLoadProbe(&mix, sent, baseline);
        ++sent;
        ProbeRequest r = MakeProbe(&p);
        flight.Start(std::move(p), r);
        return r;
      },
      [&](ProbeResponse resp) {
        std::pair<Probe, ProbeRequest> answered = flight.Finish(resp.id);
        const Completion c = session_.Parse(resp, answered.first.stream);
        session_.Note(o_.tenants[answered.first.tenant], c);
        // A provider's "slow down": the rate cut, the probe sent again
        // after its wait, never judged (Judge records it if it gives up).
        if (IsRateLimited(c)) {
          rate.RateLimited();
          if (flight.Hold(&answered, c, absl::Now(), deadline_at)) return;
        } else if (c.status != 0) {
          rate.Answered();
        }
        absl::Status s = Judge(answered.first, c);
        if (!s.ok() && error.ok()) error = s;
        if (Clock::now() - last_progress > std::chrono::seconds(2)) {
          last_progress = Clock::now();
          Progress("running");
        }
      },
      [&] { return over() || (no_new() && !flight.holding()); });
  for (const auto& [p, last] : flight.TakeHeld()) {
    absl::Status s = Judge(p, last);  // recorded with the answer it had
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
