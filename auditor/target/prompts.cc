#include "auditor/target/prompts.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/random.h"

namespace kvcanary::auditor {
namespace {
constexpr absl::string_view kBoundaryUnit = " Tom had a red ball.";
}  // namespace

CacheBuster::CacheBuster() : rng_(RandomU64()) {}

std::string CacheBuster::Next() {
  return absl::StrFormat("Ticket %010u.", rng_() % 10000000000ull);
}

std::string BoundaryPrompt(const std::string& prefix, int units) {
  std::string p =
      absl::StrCat(prefix, prefix.empty() ? "" : " ", "Once upon a time.");
  for (int i = 0; i < units; ++i) absl::StrAppend(&p, kBoundaryUnit);
  return p;
}

}  // namespace kvcanary::auditor
