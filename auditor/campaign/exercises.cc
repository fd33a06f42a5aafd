// The campaign's exercises (docs/auditor.md, "Exercises"): the traffic it
// sends on purpose down the paths abort and slot bugs live on, the bursts
// after the load and the moment each hang-up probe's client gives up.
#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "absl/time/clock.h"
#include "auditor/campaign/campaign_internal.h"
#include "common/random.h"
#include "common/status_macros.h"

namespace kvcanary::auditor::campaign_internal {

// The bursts the detectors ask for (DetectorSpec::burst_size): each one
// `size` probes, tenants in turn, all started at once, a second apart;
// plants, echoes, sniffs and (where answers are exact alone) golden
// prompts, so whatever a burst mixes up between requests shows in an
// answer as well as in a trace.
absl::Status Campaign::Bursts() {
  int size = 0, bursts = 0;
  for (const auto& d : detectors_) {
    size = std::max(size, d->spec().burst_size);
    bursts = std::max(bursts, d->spec().bursts);
  }
  if (size == 0 || bursts == 0) return absl::OkStatus();
  const int tenants = static_cast<int>(o_.tenants.size());
  std::vector<ProbeKind> kinds = {ProbeKind::kPlant, ProbeKind::kEcho,
                                  ProbeKind::kSniff};
  if (!cal_.golden.empty() && cal_.golden_by_rate.empty()) {
    kinds.push_back(ProbeKind::kGolden);
  }
  absl::Status error;
  for (int b = 0; b < bursts && error.ok(); ++b) {
    // A whole burst within the budget, or none.
    if (!session_.spend().Affordable(size)) {
      session_.spend().NoteStopped();
      break;
    }
    if (b > 0) absl::SleepFor(absl::Seconds(1));
    std::map<uint64_t, Probe> in_flight;
    int sent = 0;
    MultiClient client(size);
    client.Run(
        [&]() -> std::optional<ProbeRequest> {
          if (sent >= size) return std::nullopt;
          Probe p;
          p.tenant = sent % tenants;
          p.burst = b;
          // The first kind this tenant can be sent, from its turn on.
          for (size_t k = 0; k < kinds.size(); ++k) {
            p.kind = kinds[(sent / tenants + k) % kinds.size()];
            if (p.kind == ProbeKind::kPlant && cal_.plants[p.tenant].empty()) {
              continue;
            }
            if (p.kind == ProbeKind::kEcho && !cal_.nonces[p.tenant]) continue;
            break;
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
        },
        [&] { return sent >= size; });
    if (error.ok()) error = session_.down();
  }
  RETURN_IF_ERROR(error);
  return Flush();
}

// Stages in turn per tenant; the ones in mid-prefill and mid-transfer only
// where the first-token time alone was calibrated (they are aimed by it).
void Campaign::AimHangup(Probe* p, ProbeRequest* r) {
  const LatencyModel& lm = cal_.latency;
  const bool timed = lm.calibrated && lm.per_token_ms > 0;
  int& cursor = tenants_[p->tenant].hangup_cursor;
  HangupStage stage;
  do {
    stage = static_cast<HangupStage>(cursor++ % kHangupStages);
  } while (!timed &&
           (stage == HangupStage::kPrefill || stage == HangupStage::kTransfer));
  p->hangup = stage;
  const double alone_ms = lm.base_ms + lm.per_token_ms * p->predicted;
  const double u = static_cast<double>(RandomU64() % 1000) / 1000;
  switch (stage) {
    case HangupStage::kQueued:
      r->hang_up_after = absl::Milliseconds(1);
      break;
    case HangupStage::kPrefill:
      r->hang_up_after =
          absl::Milliseconds(std::max(1.0, alone_ms * (0.3 + 0.4 * u)));
      break;
    case HangupStage::kTransfer:
      r->hang_up_after =
          absl::Milliseconds(std::max(1.0, alone_ms * (0.8 + 0.2 * u)));
      break;
    case HangupStage::kDecode:
      r->hang_up_at_first_byte = true;
      break;
  }
}

}  // namespace kvcanary::auditor::campaign_internal
