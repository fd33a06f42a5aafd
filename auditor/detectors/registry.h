// Every campaign detector, registered by its own file, and what derives
// from the list: the detectors a campaign runs, the --require, --floor and
// --test-break flags' names, and (through the result) the detector table,
// the JSON report, JUnit cases and metrics labels. Adding a detector is
// one file and its tests:
//
//   class MyDetector : public Detector { ... static DetectorSpec Spec(); };
//   KVCANARY_REGISTER_DETECTOR(MyDetector);
//
// (the class default-constructible; Spec() returns its spec). The
// auditor's library is an object library, so every registration is linked
// into every binary that uses it.
//
// Thread-safe.
#ifndef KVCANARY_AUDITOR_DETECTORS_REGISTRY_H_
#define KVCANARY_AUDITOR_DETECTORS_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "auditor/detectors/detector.h"

namespace kvcanary::auditor {

class DetectorRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Detector>()>;
  struct Entry {
    DetectorSpec spec;
    Factory make;
  };

  // The registry every detector file registers in.
  static DetectorRegistry& Global();

  // CHECK-fails for a name that is not snake_case or is taken, or a spec
  // with no unit: a programming error.
  void Add(const DetectorSpec& spec, Factory make);
  void Remove(const std::string& name);
  bool Has(absl::string_view name) const;
  // In report order (spec.order, then name).
  std::vector<Entry> Entries() const;
  std::vector<std::string> Names() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

// Registers for its lifetime: at namespace scope (what
// KVCANARY_REGISTER_DETECTOR declares) for the program's, in a test's
// scope for the test's.
class DetectorRegistration {
 public:
  DetectorRegistration(
      const DetectorSpec& spec, DetectorRegistry::Factory make,
      DetectorRegistry* registry = &DetectorRegistry::Global());
  ~DetectorRegistration();
  DetectorRegistration(const DetectorRegistration&) = delete;
  DetectorRegistration& operator=(const DetectorRegistration&) = delete;

 private:
  DetectorRegistry* const registry_;
  const std::string name_;
};

#define KVCANARY_REGISTER_DETECTOR(Class)                                   \
  static const ::kvcanary::auditor::DetectorRegistration                    \
      kvcanary_detector_registration_##Class(Class::Spec(), [] {            \
        return std::unique_ptr<::kvcanary::auditor::Detector>(new Class()); \
      })

// Detector names from a flag ("golden,echo"); kInvalidArgument naming an
// unknown one and the known ones. Empty spec: empty set (the defaults).
absl::StatusOr<std::set<std::string>> ParseDetectorList(
    absl::string_view spec,
    const DetectorRegistry& registry = DetectorRegistry::Global());

// Floors per detector from a flag: "20" (every detector), or
// "20,trace=5,echo=10" (a default, then overrides); the default's key is
// "". kInvalidArgument naming the bad part: an unknown detector, a floor
// below 1 or not a number.
absl::StatusOr<std::map<std::string, int>> ParseFloors(
    absl::string_view spec,
    const DetectorRegistry& registry = DetectorRegistry::Global());

// A campaign's detectors, fresh, in report order; each one named in
// `broken` (the hidden --test-break, for tests) wrapped in a decorator that
// lets it find nothing (auditor/detectors/broken.h), so its positive
// control fails. REQUIRES: every name in `broken` registered.
std::vector<std::unique_ptr<Detector>> CreateDetectors(
    const std::set<std::string>& broken,
    const DetectorRegistry& registry = DetectorRegistry::Global());

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_DETECTORS_REGISTRY_H_
