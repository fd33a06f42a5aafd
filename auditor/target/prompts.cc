#include "auditor/target/prompts.h"

#include <set>

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
  return absl::StrFormat("%010u Ticket.", rng_() % 10000000000ull);
}

std::string CacheProbePrefix(CacheBuster* buster, int letters,
                             const std::function<uint64_t()>& random) {
  static constexpr char kLetters[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  std::string p = buster->Next();
  p.reserve(p.size() + 2 * static_cast<size_t>(letters));
  for (int i = 0; i < letters; ++i) {
    p.push_back(' ');
    p.push_back(kLetters[random() % 52]);
  }
  return p;
}

std::string BoundaryPrompt(const std::string& prefix, int units) {
  std::string p =
      absl::StrCat(prefix, prefix.empty() ? "" : " ", "Once upon a time.");
  for (int i = 0; i < units; ++i) absl::StrAppend(&p, kBoundaryUnit);
  return p;
}

std::optional<CountFill> CountFillFor(int base, int unit_tokens,
                                      const std::string& pad, int tokens,
                                      bool at_least) {
  if (unit_tokens <= 0 || tokens < base) return std::nullopt;
  CountFill f;
  f.units = (tokens - base) / unit_tokens;
  const int rest = tokens - base - f.units * unit_tokens;
  if (!pad.empty()) {
    f.pads = rest;
  } else if (at_least && rest > 0) {
    ++f.units;
  }
  f.predicted = base + f.units * unit_tokens + f.pads;
  return f;
}

std::string CountPrompt(const std::string& prefix, const CountFill& fill,
                        const std::string& pad) {
  std::string p = BoundaryPrompt(prefix, fill.units);
  for (int i = 0; i < fill.pads; ++i) p += pad;
  return p;
}

const std::vector<std::string>& PadCandidates() {
  static const auto* kPads = new std::vector<std::string>{
      " a", " the", " and", " to", " it", " he", " was", " I"};
  return *kPads;
}

bool CountPadWorks(const std::string& pad, int unit_tokens,
                   const std::string& prefix,
                   const std::function<int(const std::string&)>& count) {
  const int c0 = count(CountPrompt(prefix, CountFill{2, 0, 0}, pad));
  if (c0 <= 0) return false;
  for (int n : std::set<int>{1, unit_tokens - 1}) {
    if (n < 1) continue;
    if (count(CountPrompt(prefix, CountFill{2, n, 0}, pad)) != c0 + n) {
      return false;
    }
  }
  return true;
}

}  // namespace kvcanary::auditor
