#include "engine/core/faults.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kvcanary::engine {

const std::vector<FaultInfo>& AllFaults() {
  static const auto* all = new std::vector<FaultInfo>{
      {Fault::kAdmissionAbortLost, "admission-abort-lost",
       "an over-long prompt's rejection is written to a field the queues never "
       "read: "
       "prefill ships a one-token placeholder page, decode attends over every "
       "page it "
       "reserved (router, prefill and decode)"},
      {Fault::kPageCountMismatch, "page-count-mismatch",
       "prefill counts pages with a floor and drops a partial last page; "
       "decode commits "
       "without comparing pages and tokens received with its reservation "
       "(prefill and "
       "decode)"},
      {Fault::kAbortTransferRace, "abort-transfer-race",
       "decode's receiver writes K/V straight into the reserved pages, and an "
       "abort frees them while the transfer is still writing: late writes "
       "land on the next owner's pages (decode)"},
      {Fault::kSampleWrongRow, "sample-wrong-row",
       "when a sequence joins a decode batch of two or more, the next R "
       "decode steps (--sample-wrong-row-steps, 8) give each decoding "
       "sequence the token sampled from the next one's logits: another "
       "request's continuation, no page read across owners (decode, or any "
       "node that decodes)"},
      {Fault::kNoScrubReuse, "no-scrub-reuse",
       "freed pages are reused unscrubbed and decode attention reads the "
       "whole last page, past what the request wrote: the previous "
       "occupant's K/V (decode, or any node that decodes)"},
      {Fault::kMetadataSlotReuse, "metadata-slot-reuse",
       "decode's transfer metadata slots are reused round-robin before they "
       "are consumed and the echoed request id is not compared: a request "
       "starts from another request's token and K/V (decode)"},
      {Fault::kPrefixHashCollision, "prefix-hash-collision",
       "the prefix cache is keyed by an unsalted 32-bit hash of the tokens: "
       "one tenant's cached prefix pages serve another (prefill, or any node "
       "with a prefix cache)"},
      {Fault::kAbortCacheInsert, "abort-cache-insert",
       "an aborted request's prompt pages are published into the prefix "
       "cache as if computed: a reservation whose transfer never arrived "
       "serves the next request with the same prefix (decode, or any node "
       "with a prefix cache)"},
      {Fault::kStaleTransferRef, "stale-transfer-ref",
       "a failed KV transfer is installed anyway: decode answers 200 over "
       "the reserved pages as their previous occupants left them, from the "
       "first token its metadata slot kept from the previous request "
       "(decode)"},
      {Fault::kCancelReuseChannel, "cancel-reuse-channel",
       "the router's keep-alive pool takes back a connection whose request "
       "was given up before its answer came, answer still on it: the next "
       "request on that connection is answered with the given-up one's "
       "(router)"},
      {Fault::kTierDropsSalt, "tier-drops-salt",
       "the host tier keys spilled prefix pages by their tokens alone, "
       "without the tenant or cache_salt: another tenant's identical prompt "
       "promotes the first tenant's page (prefill, or any node with "
       "--host-tier-pages)"},
  };
  return *all;
}

absl::StatusOr<FaultSet> FaultSet::Parse(absl::string_view names) {
  FaultSet set;
  if (names.empty() || names == "none") return set;
  for (absl::string_view name : absl::StrSplit(names, ',', absl::SkipEmpty())) {
    bool found = false;
    for (const FaultInfo& f : AllFaults()) {
      if (name == f.name) {
        set.add(f.fault);
        found = true;
      }
    }
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown fault '", name, "' (kvcanary-engine faults lists them)"));
    }
  }
  return set;
}

std::string FaultSet::ToString() const {
  std::vector<std::string> names;
  for (const FaultInfo& f : AllFaults()) {
    if (has(f.fault)) names.push_back(f.name);
  }
  return names.empty() ? "none" : absl::StrJoin(names, ",");
}

}  // namespace kvcanary::engine
