// Which probe a tenant sends next. Every probe kind first reaches its floor
// for every tenant (so a campaign of a few hundred probes can vouch for
// every detector), then the kinds are sent in proportion to their weights
// (plants and sniffs, the leak hunt, most). The campaign interleaves tenants
// probe by probe, so pages one tenant frees are reused by the next.
//
// Not thread-safe; owned by the campaign's probe loop.
#ifndef KVCANARY_AUDITOR_CAMPAIGN_PROBE_MIX_H_
#define KVCANARY_AUDITOR_CAMPAIGN_PROBE_MIX_H_

#include <array>
#include <vector>

#include "auditor/detectors/probe.h"

namespace kvcanary::auditor {

class ProbeMix {
 public:
  // floors: probes of each kind per tenant before the weights apply;
  // weights: the proportions afterwards (0: the kind is never sent).
  ProbeMix(int tenants, std::array<int, kProbeKinds> floors,
           std::array<int, kProbeKinds> weights);
  // Never send `kind` to `tenant` (e.g. echo for a tenant whose nonce did
  // not echo alone).
  void Disable(int tenant, ProbeKind kind);
  // The next kind for `tenant`, counted as sent.
  // REQUIRES: some kind enabled for the tenant (CHECKed).
  ProbeKind Next(int tenant);
  int sent(int tenant, ProbeKind kind) const;

 private:
  const std::array<int, kProbeKinds> floors_, weights_;
  std::vector<std::array<int, kProbeKinds>> sent_;      // per tenant
  std::vector<std::array<bool, kProbeKinds>> enabled_;  // per tenant
};

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_CAMPAIGN_PROBE_MIX_H_
