#include "auditor/audits/accept/checks.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

const char* CheckStateName(CheckState s) {
  switch (s) {
    case CheckState::kSkipped:
      return "skipped";
    case CheckState::kPassed:
      return "passed";
    case CheckState::kError:
      return "error";
    case CheckState::kFailed:
      return "failed";
  }
  return "error";
}

void CheckNote::Note(CheckState s, const std::string& why) {
  if (noted && s <= state) return;
  state = s;
  message = why;
  noted = true;
}

std::string Subject(const LengthState& l, PromptKind kind) {
  auto f = l.fills.find(kind);
  std::string s = absl::StrCat(
      "length ", f == l.fills.end() ? l.length.tokens : f->second.predicted);
  if (IsEcho(kind)) absl::StrAppend(&s, ", ", PromptKindName(kind));
  return s;
}

bool SameFills(const LengthState& a, const LengthState& b) {
  if (a.length.past != b.length.past || a.fills.size() != b.fills.size()) {
    return false;
  }
  for (const auto& [kind, f] : a.fills) {
    auto g = b.fills.find(kind);
    if (g == b.fills.end() || g->second.units != f.units ||
        g->second.pads != f.pads) {
      return false;
    }
  }
  return true;
}

namespace {

// The checks stated so far, one per (check, subject), in first-seen order.
class CheckList {
 public:
  void Add(const char* check, std::string subject, const CheckNote& n,
           const std::string& unnoted) {
    const std::string key = absl::StrCat(check, "\n", subject);
    auto [it, fresh] = index_.emplace(key, entries_.size());
    if (fresh) {
      entries_.push_back({check, std::move(subject), n, unnoted});
      return;
    }
    Entry& e = entries_[it->second];
    if (n.noted) e.note.Note(n.state, n.message);
  }
  std::vector<Check> Take() {
    std::vector<Check> out;
    for (Entry& e : entries_) {
      Check c;
      c.check = e.check;
      c.subject = std::move(e.subject);
      c.state = e.note.noted ? CheckStateName(e.note.state) : "skipped";
      c.message = e.note.noted ? e.note.message : e.unnoted;
      out.push_back(std::move(c));
    }
    return out;
  }

 private:
  struct Entry {
    std::string check, subject;
    CheckNote note;
    std::string unnoted;
  };
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
};

}  // namespace

std::vector<Check> StatedChecks(const std::vector<LengthState>& lengths,
                                bool with_load) {
  CheckList out;
  for (const LengthState& l : lengths) {
    const std::string count = Subject(l, PromptKind::kCount);
    if (l.length.past) {
      out.Add("refusal", count, l.refusal,
              l.unanswered == 0
                  ? "not sent"
                  : absl::StrCat("every answer was a 200 without one (",
                                 l.unanswered,
                                 " dropped or unreadable): neither a refusal "
                                 "nor an admission"));
      if (l.prompt_tokens.noted) {
        out.Add("prompt_tokens", count, l.prompt_tokens, "not counted");
      }
      continue;
    }
    CheckNote counts = l.prompt_tokens;
    if (counts.state == CheckState::kPassed) {
      counts.message =
          absl::StrCat(l.counted_ok, " answers reported the predicted count");
    }
    out.Add("prompt_tokens", count, counts, "not counted");
    for (PromptKind p : kEchoPositions) {
      auto it = l.echo.find(p);
      out.Add("echo", Subject(l, p),
              it == l.echo.end() ? CheckNote{} : it->second, "not sent");
    }
    const std::string golden = Subject(l, PromptKind::kGolden);
    out.Add("golden", golden, l.golden, "not sent");
    if (with_load) {
      out.Add("golden_under_load", golden, l.golden_under_load, "not sent");
    }
  }
  return out.Take();
}

std::string CoveredText(const std::vector<LengthState>& lengths) {
  std::vector<std::string> parts;
  for (PromptKind p : kEchoPositions) {
    std::vector<int> covered;
    for (const LengthState& l : lengths) {
      auto it = l.echo_covered.find(p);
      if (it != l.echo_covered.end() && it->second) {
        covered.push_back(l.length.tokens);
      }
    }
    if (!covered.empty()) {
      parts.push_back(
          absl::StrCat(PromptKindName(p), " ", RangesText(covered)));
    }
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, "; ");
}

std::vector<int> EndEchoGaps(const std::vector<LengthState>& lengths) {
  std::vector<int> gaps;
  bool seen = false;
  for (const LengthState& l : lengths) {
    if (l.length.past) continue;
    auto runs = l.echo_runs.find(PromptKind::kEchoEnd);
    if (runs == l.echo_runs.end() || runs->second == 0) continue;
    auto it = l.echo_covered.find(PromptKind::kEchoEnd);
    const bool covered = it != l.echo_covered.end() && it->second;
    if (covered) {
      seen = true;
    } else if (seen) {
      gaps.push_back(l.length.tokens);
    }
  }
  return gaps;
}

json LengthsJson(const std::vector<LengthState>& lengths) {
  json out = json::array();
  for (const LengthState& l : lengths) {
    json fills = json::object();
    for (const auto& [kind, f] : l.fills) {
      fills[PromptKindName(kind)] = {
          {"units", f.units}, {"pads", f.pads}, {"predicted", f.predicted}};
    }
    json echo = json::object();
    for (const auto& [p, runs] : l.echo_runs) {
      auto e = l.echo_echoed.find(p);
      auto c = l.echo_covered.find(p);
      echo[PromptKindName(p)] = {
          {"runs_alone", runs},
          {"echoed_alone", e == l.echo_echoed.end() ? 0 : e->second},
          {"covered", c != l.echo_covered.end() && c->second}};
    }
    json checks = json::object();
    auto put = [&checks](const char* name, const CheckNote& n) {
      if (n.noted) checks[name] = CheckStateName(n.state);
    };
    put("prompt_tokens", l.prompt_tokens);
    put("refusal", l.refusal);
    put("golden", l.golden);
    put("golden_under_load", l.golden_under_load);
    for (const auto& [p, n] : l.echo) {
      put(absl::StrCat("echo_", PromptKindName(p)).c_str(), n);
    }
    out.push_back({{"target", l.length.tokens},
                   {"past", l.length.past},
                   {"why", l.length.why},
                   {"merged", l.merged},
                   {"fills", fills},
                   {"counted", l.counted},
                   {"counted_ok", l.counted_ok},
                   {"echo", echo},
                   {"checks", checks}});
  }
  return out;
}

}  // namespace kvcanary::auditor
