// Campaign records as an export bundle hands them to the OSCAL and answer
// sheet writers: detectors and incidents from the real ToJson.
#ifndef KVCANARY_TESTS_AUDITOR_CAMPAIGN_RECORDS_H_
#define KVCANARY_TESTS_AUDITOR_CAMPAIGN_RECORDS_H_

#include <string>
#include <vector>

#include "auditor/evidence/controls.h"
#include "auditor/result/coverage.h"
#include "auditor/result/incidents.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor::records {

inline nlohmann::json Detector(const std::string& name, int acme, int globex,
                               int findings = 0) {
  DetectorCoverage d;
  d.name = name;
  d.unit = "probes";
  d.coverage = {{"acme", acme}, {"globex", globex}};
  d.findings = findings;
  d.Judge({"acme", "globex"});
  return d.ToJson();
}

inline nlohmann::json CriticalIncident() {
  Incident i;
  i.id = "i-0badc0de";
  i.detector = "output_scan";
  i.kind = "foreign_marker";
  i.severity = Severity::kCritical;
  i.reader = "acme";
  i.writer = "globex";
  i.tenants = {"acme", "globex"};
  i.first_seen_us = 1780000000000000;
  i.last_seen_us = 1780000060000000;
  i.rows = 3;
  i.probes = {4, 9, 11};
  return i.ToJson();
}

inline nlohmann::json Campaign(const std::string& id,
                               const std::string& command,
                               const std::string& verdict) {
  return {{"campaign", id},
          {"command", command},
          {"target", "http://127.0.0.1:8080"},
          {"tenants", {"acme", "globex"}},
          {"started", "2026-05-01T10:00:00.000Z"},
          {"ended", "2026-05-01T10:05:00+02:00"},
          {"verdict", verdict},
          {"reasons", nlohmann::json::array()},
          {"detectors", nlohmann::json::array()},
          {"incidents", nlohmann::json::array()},
          {"cited_rows", {12, 13, 40}},
          {"file", "campaigns/" + id + ".json"}};
}

// A probe campaign with a critical cross-tenant incident.
inline nlohmann::json FindingsCampaign() {
  nlohmann::json c = Campaign("c20260501-a", "probe", "findings");
  c["reasons"] = {"1 incident"};
  c["detectors"] = {Detector("output_scan", 31, 33, 3),
                    Detector("trace", 40, 41), Detector("boundary", 25, 22)};
  c["incidents"] = {CriticalIncident()};
  return c;
}

// A clean probe campaign.
inline nlohmann::json CleanCampaign() {
  nlohmann::json c = Campaign("c20260502-b", "probe", "clean");
  c["detectors"] = {Detector("output_scan", 31, 33), Detector("trace", 40, 41),
                    Detector("boundary", 25, 22)};
  return c;
}

inline ExportContext Context() {
  ExportContext ctx;
  ctx.origin = "kvcanary/test-host";
  ctx.since = "2026-05-01T00:00:00Z";
  ctx.until = "2026-05-31T00:00:00Z";
  ctx.tree_size = 1234;
  ctx.root_hash_hex = std::string(64, 'a');
  ctx.checkpoint_file = "checkpoint";
  return ctx;
}

}  // namespace kvcanary::auditor::records

#endif  // KVCANARY_TESTS_AUDITOR_CAMPAIGN_RECORDS_H_
