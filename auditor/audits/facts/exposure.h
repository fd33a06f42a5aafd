// The exposure checks of `kvcanary-auditor facts`: one tenant (the writer)
// plants a completion whose prompt holds a fresh marker
// (canaries/marker.h); what another tenant's key, or no key at all, can
// read afterwards is searched for it. Found there, the endpoint shows one
// client's prompt (or its request) to others: a finding, proven by the
// marker and never by guessing at a field's meaning. docs/facts.md.
#ifndef KVCANARY_AUDITOR_AUDITS_FACTS_EXPOSURE_H_
#define KVCANARY_AUDITOR_AUDITS_FACTS_EXPOSURE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "auditor/audits/facts/reads.h"
#include "auditor/result/finding.h"
#include "canaries/marker.h"
#include "canaries/scanner.h"

namespace kvcanary::auditor {

struct FactsPlant {
  std::string writer;  // the tenant who planted
  canaries::Marker marker;
  std::string prompt;           // in memory only; evidence holds its hash
  int64_t probe = -1;           // the auditor's probe number of the plant
  int status = 0;               // HTTP status of the plant
  bool accepted = false;        // a usable 200: the server took the prompt
  std::string response_id;      // the answer's "id"
  uint64_t engine_request = 0;  // x-kvcanary-request-id; 0: not reported
};

// A short prompt that holds `marker` (a few dozen tokens: it fits any
// context).
std::string PlantPrompt(const canaries::Marker& marker);

// The shortest run of the marker's words that counts as the marker: half
// of it (64 bits), as for a generic marker shape (canaries/scanner.h).
inline constexpr int kExposureMinWords = canaries::kGenericMinWords;

struct ExposureHit {
  std::string kind;  // "prompt_exposed" or "activity_exposed"
  std::string what;  // "marker", "response_id" or "engine_request"
  int words_matched = 0;
  bool exact = false;
};

// Searches what one read returned for the plant: a run of at least
// kExposureMinWords of the marker's words is the prompt itself
// (prompt_exposed); else the plant's response id as a whole token is its
// request (activity_exposed). REQUIRES: `scanner` compiled, holding
// plant.marker.
std::optional<ExposureHit> FindPlant(const canaries::MarkerScanner& scanner,
                                     const FactsPlant& plant,
                                     const EndpointRead& read);

// The finding of `hit` in what `where` returned to its reader: critical on
// the target (another client's prompt or request, readable with no key or
// another tenant's), high on an engine node (the internal plane, reached
// from where the auditor runs; docs/facts.md says why).
Finding ExposureFinding(const FactsPlant& plant, const ReadSpec& where,
                        const ExposureHit& hit, int http_status,
                        const std::string& body_sha256);

// The names of fields of a JSON body that hold prompt-like text (prompt,
// generated, messages, ...), non-empty: a hint for keyless reads when no
// marker could be planted, never a finding by itself.
std::vector<std::string> PromptLikeFields(const EndpointRead& read);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_FACTS_EXPOSURE_H_
