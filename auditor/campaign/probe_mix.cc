#include "auditor/campaign/probe_mix.h"

#include "common/check.h"

namespace kvcanary::auditor {

ProbeMix::ProbeMix(int tenants, std::array<int, kProbeKinds> floors,
                   std::array<int, kProbeKinds> weights)
    : floors_(floors), weights_(weights) {
  CHECK_GT(tenants, 0);
  std::array<bool, kProbeKinds> enabled;
  for (int k = 0; k < kProbeKinds; ++k) enabled[k] = weights[k] > 0;
  sent_.assign(tenants, std::array<int, kProbeKinds>{});
  enabled_.assign(tenants, enabled);
}

void ProbeMix::Disable(int tenant, ProbeKind kind) {
  enabled_[tenant][static_cast<int>(kind)] = false;
}

ProbeKind ProbeMix::Next(int tenant) {
  const auto& sent = sent_[tenant];
  const auto& enabled = enabled_[tenant];
  // Below a floor first: the kind furthest below its floor (by share).
  int best = -1;
  double best_share = 0;
  for (int k = 0; k < kProbeKinds; ++k) {
    if (!enabled[k] || sent[k] >= floors_[k]) continue;
    const double share = static_cast<double>(sent[k]) / floors_[k];
    if (best < 0 || share < best_share) {
      best = k;
      best_share = share;
    }
  }
  // Then by weight: the kind with the fewest probes per unit of weight.
  if (best < 0) {
    for (int k = 0; k < kProbeKinds; ++k) {
      if (!enabled[k]) continue;
      const double share = static_cast<double>(sent[k]) / weights_[k];
      if (best < 0 || share < best_share) {
        best = k;
        best_share = share;
      }
    }
  }
  CHECK_GE(best, 0) << "no probe kind enabled for tenant " << tenant;
  ++sent_[tenant][best];
  return static_cast<ProbeKind>(best);
}

int ProbeMix::sent(int tenant, ProbeKind kind) const {
  return sent_[tenant][static_cast<int>(kind)];
}

}  // namespace kvcanary::auditor
