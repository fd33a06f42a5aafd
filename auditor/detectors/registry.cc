#include "auditor/detectors/registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "auditor/detectors/broken.h"
#include "common/check.h"

namespace kvcanary::auditor {
namespace {

// [a-z][a-z0-9_]*: what a flag, a JSON name and a metrics label all take.
bool IsSnakeCase(absl::string_view name) {
  if (name.empty() || !absl::ascii_islower(name[0])) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_';
  });
}

absl::Status Unknown(absl::string_view name, const DetectorRegistry& r) {
  return absl::InvalidArgumentError(
      absl::StrCat("unknown detector '", name, "' (want one of ",
                   absl::StrJoin(r.Names(), ", "), ")"));
}

}  // namespace

DetectorRegistry& DetectorRegistry::Global() {
  static auto* registry = new DetectorRegistry();
  return *registry;
}

void DetectorRegistry::Add(const DetectorSpec& spec, Factory make) {
  CHECK(IsSnakeCase(spec.name))
      << "detector name '" << spec.name << "' is not snake_case";
  CHECK(!spec.unit.empty()) << "detector " << spec.name << " has no unit";
  CHECK(!(spec.exercise && spec.required_by_default))
      << "exercise " << spec.name << " is required by default";
  absl::MutexLock lock(&mu_);
  CHECK(entries_.count(spec.name) == 0)
      << "detector " << spec.name << " registered twice";
  entries_[spec.name] = Entry{spec, std::move(make)};
}

void DetectorRegistry::Remove(const std::string& name) {
  absl::MutexLock lock(&mu_);
  entries_.erase(name);
}

bool DetectorRegistry::Has(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  return entries_.count(std::string(name)) > 0;
}

std::vector<DetectorRegistry::Entry> DetectorRegistry::Entries() const {
  std::vector<Entry> out;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, e] : entries_) out.push_back(e);
  }
  std::stable_sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    return a.spec.order < b.spec.order;
  });
  return out;
}

std::vector<std::string> DetectorRegistry::Names() const {
  std::vector<std::string> names;
  for (const Entry& e : Entries()) names.push_back(e.spec.name);
  return names;
}

DetectorRegistration::DetectorRegistration(const DetectorSpec& spec,
                                           DetectorRegistry::Factory make,
                                           DetectorRegistry* registry)
    : registry_(registry), name_(spec.name) {
  registry_->Add(spec, std::move(make));
}

DetectorRegistration::~DetectorRegistration() { registry_->Remove(name_); }

absl::StatusOr<std::set<std::string>> ParseDetectorList(
    absl::string_view spec, const DetectorRegistry& registry) {
  std::set<std::string> out;
  for (absl::string_view part : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    const std::string name(absl::StripAsciiWhitespace(part));
    if (!registry.Has(name)) return Unknown(name, registry);
    out.insert(name);
  }
  return out;
}

absl::StatusOr<std::map<std::string, int>> ParseFloors(
    absl::string_view spec, const DetectorRegistry& registry) {
  std::map<std::string, int> out;
  for (absl::string_view part : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    part = absl::StripAsciiWhitespace(part);
    std::string name;
    absl::string_view value = part;
    if (const size_t eq = part.find('='); eq != absl::string_view::npos) {
      name = std::string(absl::StripAsciiWhitespace(part.substr(0, eq)));
      value = absl::StripAsciiWhitespace(part.substr(eq + 1));
      if (!registry.Has(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--floor: ", Unknown(name, registry).message()));
      }
    }
    if (out.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--floor: ", name.empty() ? "the default" : name, " given twice"));
    }
    int n = 0;
    // 0 would make a detector active with nothing checked: to leave one
    // out, --require the others.
    if (!absl::SimpleAtoi(value, &n) || n < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--floor: '", part, "' is not a count >= 1"));
    }
    out[name] = n;
  }
  return out;
}

std::vector<std::unique_ptr<Detector>> CreateDetectors(
    const std::set<std::string>& broken, const DetectorRegistry& registry) {
  std::vector<std::unique_ptr<Detector>> out;
  for (const DetectorRegistry::Entry& e : registry.Entries()) {
    std::unique_ptr<Detector> d = e.make();
    CHECK(d->spec().name == e.spec.name);
    if (broken.count(e.spec.name)) d = BreakDetector(std::move(d));
    out.push_back(std::move(d));
  }
  for (const std::string& name : broken) {
    CHECK(registry.Has(name)) << "--test-break names no detector: " << name;
  }
  return out;
}

}  // namespace kvcanary::auditor
