// What one `kvcanary-auditor facts` run gathered (FactsRun), and what it
// makes of it: one check per endpoint probed and per exposure check (one
// JUnit case each), the "facts" and "exposure" detectors with the coverage
// that earns a verdict, and the command's details (the facts table with
// every value's source). docs/facts.md.
#ifndef KVCANARY_AUDITOR_AUDITS_FACTS_REPORT_H_
#define KVCANARY_AUDITOR_AUDITS_FACTS_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "auditor/audits/facts/exposure.h"
#include "auditor/audits/facts/fields.h"
#include "auditor/audits/facts/reads.h"
#include "auditor/result/coverage.h"
#include "auditor/result/finding.h"
#include "auditor/result/result.h"
#include "auditor/target/completion.h"
#include "auditor/target/multi_client.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// One behaviour completion (fields.h kinds) and what came back.
struct BehaviourProbe {
  int64_t probe = 0;
  std::string kind;
  std::string reader;   // a tenant, or kNoKeyReader
  std::string request;  // the request line, "POST /v1/chat/completions"
  ProbeResponse response;
  Completion completion;
};

// One engine node's trace stream, followed without a key.
struct FactsTrace {
  std::string url;
  absl::Status start;  // not OK: it could not be followed
  absl::Status end;    // how the stream ended
  uint64_t events = 0;
  size_t requests_seen = 0;
  bool plant_seen = false;
};

struct FactsRun {
  std::string target;
  std::vector<std::string> tenants;
  std::vector<EndpointRead> before;  // the facts reads, before the plant
  std::vector<EndpointRead> after;   // the exposure reads, after it
  std::vector<BehaviourProbe> behaviour;
  std::vector<FactsTrace> traces;
  FactsPlant plant;                // plant.probe < 0: none sent
  bool planted = false;            // the plant got a usable 200
  std::string no_plant;            // why not, if not
  std::vector<std::string> hints;  // prompt-like fields read without a key
  FactsTable table;
};

// The detectors `facts` runs, in report order.
inline constexpr const char* kFactsDetectorNames[] = {"facts", "exposure"};

// Whether `read` got an answer that says something about the endpoint: a
// 200, a 401 or 403 (there, closed to this reader), or a 404, 405 or 501
// (not there). A 429, a 5xx, a redirect or no HTTP answer at all read
// nothing.
bool ReadCounts(const EndpointRead& read);

// One "endpoint" check per endpoint probed (passed; skipped when every
// answer was 404, 405 or 501; error when a read does not count), one
// "completion" check per behaviour completion (error without an HTTP
// answer), a "plant" check, and one "exposure" check per reader and per
// node trace (failed when the plant was found), plus, with one tenant,
// one for the other tenant's key there is none of. Required checks that
// could not run (no plant) are errors, never skipped.
std::vector<Check> FactsChecks(const FactsRun& run,
                               const std::vector<Finding>& findings);

// The "facts" detector (coverage: target endpoints read, per reader) and
// the "exposure" detector (coverage: target endpoints read after the
// plant, per reader), judged. Either is inconclusive when a read does not
// count (ReadCounts); exposure also when nothing usable was planted or
// there is only one tenant (and nothing was found).
std::vector<DetectorCoverage> FactsDetectors(
    const FactsRun& run, const std::vector<Finding>& findings);

// The command's details: each field's value (or "not revealed"), their
// sources, every endpoint's answers by reader (status, bytes, SHA-256),
// the behaviour completions, revealing headers and the exposure checks.
nlohmann::json FactsDetails(const FactsRun& run,
                            const std::vector<Finding>& findings);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_FACTS_REPORT_H_
