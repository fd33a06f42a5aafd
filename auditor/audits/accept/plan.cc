#include "auditor/audits/accept/plan.h"

#include <algorithm>
#include <cstdint>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "auditor/campaign/calibrate.h"
#include "canaries/templates.h"
#include "common/check.h"

namespace kvcanary::auditor {
namespace {

// The question golden asks after the filler: fixed, so its greedy answer
// at a length is one answer.
constexpr int kGoldenQuestion = 0;
// What the echo kinds end with: where a model that read the block names
// its character (canaries::EchoPrompt ends the same way).
constexpr const char* kAsk = " The";

// The echo block around `nonce`: canaries::EchoPrompt without its last
// word, which the ask puts at the very end of the prompt.
std::string EchoBlock(const canaries::Marker& nonce) {
  std::string p = canaries::EchoPrompt(nonce);
  CHECK(p.size() > 4 && p.compare(p.size() - 4, 4, kAsk) == 0);
  p.resize(p.size() - 4);
  return p;
}

// `units` of BoundaryPrompt's filler, without its head.
std::string FillerText(int units) {
  static const size_t kHead = BoundaryPrompt("", 0).size();
  return BoundaryPrompt("", units).substr(kHead);
}

std::string Pads(const std::string& pad, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += pad;
  return out;
}

// Lower-case runs of letters, as CheckEcho compares words.
std::set<std::string> Words(const std::string& text) {
  std::set<std::string> words;
  std::string cur;
  for (char c : text) {
    if (absl::ascii_isalpha(static_cast<unsigned char>(c))) {
      cur.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
    } else if (!cur.empty()) {
      words.insert(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) words.insert(cur);
  return words;
}

}  // namespace

const char* PromptKindName(PromptKind kind) {
  switch (kind) {
    case PromptKind::kCount:
      return "count";
    case PromptKind::kEchoStart:
      return "start";
    case PromptKind::kEchoMiddle:
      return "middle";
    case PromptKind::kEchoEnd:
      return "end";
    case PromptKind::kGolden:
      return "golden";
  }
  return "count";
}

bool IsEcho(PromptKind kind) {
  return kind == PromptKind::kEchoStart || kind == PromptKind::kEchoMiddle ||
         kind == PromptKind::kEchoEnd;
}

std::optional<Fill> FillFor(const FillerModel& model, PromptKind kind,
                            int target, bool at_least) {
  auto it = model.base.find(kind);
  if (it == model.base.end() || model.unit_tokens <= 0) return std::nullopt;
  const int base = it->second;
  if (target < base) return std::nullopt;
  Fill f;
  f.units = (target - base) / model.unit_tokens;
  const int rest = target - base - f.units * model.unit_tokens;
  if (!model.pad.empty()) {
    f.pads = rest;
  } else if (at_least && rest > 0) {
    ++f.units;
  }
  f.predicted = base + f.units * model.unit_tokens + f.pads;
  return f;
}

std::string BuildAcceptPrompt(PromptKind kind, const std::string& prefix,
                              const Fill& fill, const std::string& pad,
                              const canaries::Marker* nonce) {
  const std::string pads = Pads(pad, fill.pads);
  if (IsEcho(kind)) {
    CHECK(nonce != nullptr);
  }
  switch (kind) {
    case PromptKind::kCount:
      return BoundaryPrompt(prefix, fill.units) + pads;
    case PromptKind::kEchoStart:
      return absl::StrCat(BoundaryPrompt(prefix, 0), " ", EchoBlock(*nonce),
                          FillerText(fill.units), pads, kAsk);
    case PromptKind::kEchoMiddle: {
      const int before = fill.units / 2;
      return absl::StrCat(BoundaryPrompt(prefix, before), " ",
                          EchoBlock(*nonce), FillerText(fill.units - before),
                          pads, kAsk);
    }
    case PromptKind::kEchoEnd:
      return absl::StrCat(BoundaryPrompt(prefix, fill.units), pads, " ",
                          EchoBlock(*nonce), kAsk);
    case PromptKind::kGolden:
      return absl::StrCat(BoundaryPrompt(prefix, fill.units), pads, " ",
                          canaries::GoldenPrompt(kGoldenQuestion));
  }
  return "";
}

std::string ShortEchoPrompt(const std::string& prefix,
                            const canaries::Marker& nonce) {
  return BuildAcceptPrompt(PromptKind::kEchoEnd, prefix, Fill{}, "", &nonce);
}

bool NonceStandsOut(const canaries::Marker& nonce) {
  std::string own = absl::StrCat("Ticket ", BoundaryPrompt("", 1), " ", kAsk,
                                 " ", canaries::GoldenPrompt(kGoldenQuestion));
  for (const std::string& p : PadCandidates()) absl::StrAppend(&own, p);
  std::set<std::string> template_words = Words(own);
  // The block's own words: those of two blocks around two one-word nonces
  // of different words (the block names its character by the nonce's
  // first word, which is the nonce's, not the template's).
  canaries::Marker a, b;
  a.words = {0};
  b.words = {1};
  const std::set<std::string> in_a = Words(canaries::EchoPrompt(a));
  for (const std::string& w : Words(canaries::EchoPrompt(b))) {
    if (in_a.count(w)) template_words.insert(w);
  }
  for (const std::string& w : Words(nonce.text)) {
    if (template_words.count(w)) return false;
  }
  return true;
}

std::vector<SweepLength> PlanLengths(int page_tokens, int shortest,
                                     int within_max, int refuse_above,
                                     int max_past_extra) {
  std::map<int, SweepLength> by;
  auto add = [&](int tokens, const char* why, bool past) {
    if (!past && (tokens < shortest || tokens > within_max)) return;
    SweepLength& l = by[tokens];
    l.tokens = tokens;
    l.past = past;
    if (std::find(l.why.begin(), l.why.end(), why) == l.why.end()) {
      l.why.push_back(why);
    }
  };
  if (page_tokens > 0) {
    for (int64_t k = 1; k * page_tokens - 1 <= within_max; ++k) {
      for (int d = -1; d <= 1; ++d) {
        add(static_cast<int>(k * page_tokens + d), "page_boundary", false);
      }
    }
  }
  for (int64_t p = 1; p <= within_max; p *= 2) {
    add(static_cast<int>(p), "power_of_two", false);
  }
  if (within_max > 0) add(within_max, "limit", false);
  if (refuse_above > 0) {
    add(refuse_above + 1, "past_limit", true);
    add(refuse_above + std::max(1, page_tokens), "past_limit", true);
    add(refuse_above + std::min(refuse_above, std::max(1, max_past_extra)),
        "past_limit", true);
  }
  std::vector<SweepLength> out;
  for (auto& [tokens, l] : by) out.push_back(std::move(l));
  return out;
}

std::string RangesText(const std::vector<int>& v) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(v[i])
                           : absl::StrCat(v[i], "..", v[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace kvcanary::auditor
