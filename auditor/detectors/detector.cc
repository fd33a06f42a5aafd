#include "auditor/detectors/detector.h"

namespace kvcanary::auditor {

absl::Status Detector::Start(const DetectorSettings&, CampaignIo&) {
  return absl::OkStatus();
}

void Detector::Judge(const Probe&, const Completion&,
                     const std::vector<Finding>&, FindingSink&) {}

absl::Status Detector::Finish(CampaignIo&, FindingSink&) {
  return absl::OkStatus();
}

int Detector::Floor(const DetectorSettings& settings) const {
  const std::map<std::string, int>& floors = settings.floors;
  if (auto it = floors.find(spec().name); it != floors.end()) {
    return it->second;
  }
  if (spec().default_floor > 0) return spec().default_floor;
  return FloorOf(floors, "");
}

std::optional<bool> RunControl(const Detector& d) {
  const std::vector<ControlCase> cases = d.Controls();
  if (cases.empty()) return std::nullopt;
  for (const ControlCase& c : cases) {
    FindingList got;
    c.run(got);
    if (!c.expect(got.findings)) return false;
  }
  return true;
}

DetectorCoverage JudgedCoverage(const Detector& d, const CoverageRules& rules) {
  const int floor = d.Floor(rules.settings);
  DetectorCoverage c = d.Coverage(floor);
  c.name = d.spec().name;
  if (c.unit.empty()) c.unit = d.spec().unit;
  c.floor = floor;
  if (rules.control.has_value() && !*rules.control) {
    c.AddFailure("its positive control failed: the detector cannot be trusted");
  }
  c.findings = rules.findings;
  c.required = rules.required.empty()
                   ? d.spec().required_by_default && c.disabled.empty()
                   : rules.required.count(c.name) > 0;
  std::vector<std::string> judged = rules.tenants;
  if (!d.spec().covers_every_tenant && !c.coverage.empty()) {
    judged.clear();
    for (const auto& [tenant, n] : c.coverage) judged.push_back(tenant);
  }
  c.Judge(judged);
  return c;
}

}  // namespace kvcanary::auditor
