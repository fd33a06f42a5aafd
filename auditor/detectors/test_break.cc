#include "auditor/detectors/test_break.h"

namespace kvcanary::auditor {
namespace {
std::set<std::string>& Broken() {
  static auto* broken = new std::set<std::string>();
  return *broken;
}
}  // namespace

void SetTestBreak(const std::set<std::string>& detectors) {
  Broken() = detectors;
}

bool TestBroken(absl::string_view detector) {
  return Broken().count(std::string(detector)) > 0;
}

}  // namespace kvcanary::auditor
