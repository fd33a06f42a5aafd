// The one interface every campaign detector implements. A detector is one
// file (auditor/detectors/<name>.cc) that declares what it is (its spec:
// name, the probes it needs, its coverage unit and default floor, whether
// it is required by default), judges answers, runs its positive control
// through the same code it judges with, and states its coverage; it
// registers itself (auditor/detectors/registry.h), and the campaign, the
// flags (--require, --floor, --test-break), the detector table, the JSON
// report, JUnit and the metrics all take it from there. docs/auditor.md,
// "Detectors", says how to add one.
#ifndef KVCANARY_AUDITOR_DETECTORS_DETECTOR_H_
#define KVCANARY_AUDITOR_DETECTORS_DETECTOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "auditor/calibration/calibration.h"
#include "auditor/detectors/probe.h"
#include "auditor/evidence/log.h"
#include "auditor/kv_events/subscriber.h"
#include "auditor/reports/metrics.h"
#include "auditor/result/coverage.h"
#include "auditor/result/finding.h"
#include "auditor/result/result.h"
#include "auditor/target/completion.h"
#include "auditor/target/target.h"
#include "auditor/target/tenants.h"
#include "canaries/marker.h"
#include "canaries/scanner.h"
#include "common/tls.h"

namespace kvcanary::auditor {

// What a detector is. Immutable; one per detector class.
struct DetectorSpec {
  std::string name;     // snake_case, unique: flags, reports and metrics
  std::string summary;  // one line: what it catches
  std::string unit;     // what its coverage counts, per tenant
  int order = 1000;     // its place in reports (builtins: 10, 20, ...)
  // Its floor when --floor does not name it; 0: the campaign's --floor.
  int default_floor = 0;
  // Required for a clean verdict wherever it applies (it is not disabled),
  // unless --require names others.
  bool required_by_default = true;
  // Whether its Finish sends requests to the target (the kv_events pairs):
  // such detectors finish first, while the others still follow their
  // streams (so a trace sees the pairs), and not at all once the target
  // failed — when the others still finish, so that what they proved before
  // it failed is kept.
  bool finish_sends = false;
  // Whether its floor applies to every tenant of the campaign, or only to
  // the tenants its coverage names (kv_events: the writer and reader of its
  // pairs). A detector with no coverage at all is judged for every tenant.
  bool covers_every_tenant = true;
  // The probes it needs each tenant sent: kind and how many, as a share of
  // its floor. The campaign's probe mix reaches, for each kind, the most
  // any detector needs (auditor/campaign/probe_mix.h).
  std::vector<std::pair<ProbeKind, double>> probes;
  // Kinds it judges against a control sent beside each one, after the
  // load: each pair is a probe of the kind and a cache-busted at-limit
  // control of the same tenant, sent alone and back to back in random order
  // (Probe::pair). Per kind, Floor() + 1 pairs per tenant and at least
  // `paired_at_least` in all.
  std::vector<ProbeKind> paired;
  int paired_at_least = 0;
  // An exercise: it sends traffic on purpose (hang-ups, bursts) and finds
  // nothing itself — what the traffic exposes, the other detectors find —
  // so it has no positive control and its coverage counts what it did.
  // Never required by default.
  bool exercise = false;
  // Bursts it needs sent (an exercise: more requests in flight at once
  // than a split engine's transfer slots): `bursts` of `burst_size` probes
  // from the campaign's mix, every tenant in each, all started at once,
  // after the load (Probe::burst). The most any detector asks.
  int burst_size = 0, bursts = 0;
};

// Where a detector puts what it found. The campaign's sink records each
// finding as evidence; a positive control's sink keeps them to check.
class FindingSink {
 public:
  virtual ~FindingSink() = default;
  virtual void Add(Finding f) = 0;
};

// A sink that keeps what it is given.
class FindingList : public FindingSink {
 public:
  void Add(Finding f) override { findings.push_back(std::move(f)); }
  std::vector<Finding> findings;
};

// One case of a positive control: known input run through the detector's
// own judging code into a sink, and what it must have found there (for a
// known-good input: nothing).
struct ControlCase {
  std::string what;  // for people: "another tenant's marker in an answer"
  std::function<void(FindingSink&)> run;
  std::function<bool(const std::vector<Finding>&)> expect;
};

// The campaign's objects once calibrated, for judging. Outlives every use a
// detector makes of it.
struct CampaignView {
  std::vector<std::string> tenants;  // names, indexed as Probe::tenant
  const Calibration* calibration = nullptr;
  const canaries::MarkerScanner* scanner = nullptr;  // compiled
  // Per tenant, one marker the scanner knows and no plant carries.
  std::vector<canaries::Marker> control_markers;
};

// What the command asked the detectors to follow besides answers.
struct DetectorSettings {
  std::vector<std::string> trace_urls;  // engine nodes' /v1/trace
  std::string trace_token;
  tls::Files trace_tls;
  kv_events::SubscriberOptions kv_events;  // empty endpoint: none
  std::map<std::string, int> floors;       // as --floor gave them
};

// The campaign's connections, for detectors that send or record on their
// own (the kv_events pairs) or join what they followed to tenants (trace).
struct CampaignIo {
  Target* target = nullptr;
  const std::vector<AuditTenant>* tenants = nullptr;
  EvidenceLog* log = nullptr;  // may be null
  AuditorMetrics* metrics = nullptr;
  // Engine request id -> the name of the tenant whose probe it answered
  // (where the target reported one), filled as answers come back.
  std::map<uint64_t, std::string> engine_requests;
};

// Not thread-safe; owned by the campaign's thread. Calls come in this
// order: Start, Prepare, Controls, Judge (per answer), Finish, then
// Coverage and Report; Stop may come at any point after Start.
class Detector {
 public:
  virtual ~Detector() = default;
  virtual const DetectorSpec& spec() const = 0;

  // Before calibration: starts following what it reads besides answers (a
  // trace stream, a KV event stream). An error stops the campaign before
  // its first probe: it could not do what it was asked.
  virtual absl::Status Start(const DetectorSettings& settings, CampaignIo& io);
  // After calibration, before the first probe.
  virtual void Prepare(const CampaignView& view) { view_ = &view; }
  // Its positive control's cases; empty when it cannot run here (its
  // coverage then says why: nothing calibrated to run it on).
  virtual std::vector<ControlCase> Controls() const = 0;
  // One answer, of any kind (a detector judges the kinds it cares about,
  // counting its coverage). `earlier`: what the detectors before it in
  // report order found in the same answer.
  virtual void Judge(const Probe& probe, const Completion& answer,
                     const std::vector<Finding>& earlier, FindingSink& out);
  // After the probes: judgements over the whole campaign. An error ends the
  // campaign (findings already made are kept).
  virtual absl::Status Finish(CampaignIo& io, FindingSink& out);
  // Stops following (idempotent).
  virtual void Stop() {}

  // The floor it must reach for every tenant: --floor's entry for it, else
  // its spec's default, else --floor's default (kv_events: else the pairs
  // its stream asks for).
  virtual int Floor(const DetectorSettings& settings) const;
  // Its coverage: counts per tenant, and why it is disabled or cannot vouch
  // (a failed calibration it depends on), notes and stats. Name, floor,
  // required, its control's outcome and its finding count are the
  // campaign's to set (JudgedCoverage). `floor`: Floor(settings).
  virtual DetectorCoverage Coverage(int floor) const = 0;
  // Its part of the result besides coverage (the trace's nodes, the
  // kv_events pairs).
  virtual void Report(CampaignResult* r) const {}

 protected:
  const CampaignView& view() const { return *view_; }
  bool prepared() const { return view_ != nullptr; }
  const std::string& tenant_name(int i) const { return view_->tenants[i]; }

 private:
  const CampaignView* view_ = nullptr;
};

// How most detectors are written: spec() is the class's static Spec(),
// made once (KVCANARY_REGISTER_DETECTOR registers the same Spec()).
template <typename Derived>
class DetectorOf : public Detector {
 public:
  const DetectorSpec& spec() const override {
    static const DetectorSpec* const spec = new DetectorSpec(Derived::Spec());
    return *spec;
  }
};

// A count per tenant (indexed as Probe::tenant), grown on first use.
class TenantCounts {
 public:
  void Add(int tenant, int n = 1) {
    if (tenant >= static_cast<int>(n_.size())) n_.resize(tenant + 1, 0);
    n_[tenant] += n;
  }
  int operator[](size_t tenant) const {
    return tenant < n_.size() ? n_[tenant] : 0;
  }
  // tenant name -> count, for every one of `tenants` (0 if none).
  std::map<std::string, int> Named(
      const std::vector<std::string>& tenants) const {
    std::map<std::string, int> out;
    for (size_t t = 0; t < tenants.size(); ++t) out[tenants[t]] = (*this)[t];
    return out;
  }

 private:
  std::vector<int> n_;
};

// Runs `d`'s positive control: true if every case found what it must,
// nullopt if it has none to run.
std::optional<bool> RunControl(const Detector& d);

// What the campaign knows of a detector beyond its own coverage.
struct CoverageRules {
  std::vector<std::string> tenants;
  DetectorSettings settings;       // --floor among them
  std::set<std::string> required;  // --require; empty: the defaults
  std::optional<bool> control;     // its positive control's outcome
  int findings = 0;                // its finding rows
};
// d.Coverage(), named, floored, required or not, its control and findings
// counted, judged.
DetectorCoverage JudgedCoverage(const Detector& d, const CoverageRules& rules);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_DETECTORS_DETECTOR_H_
