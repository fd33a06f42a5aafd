#include "canaries/reference_scanner.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "re2/re2.h"
#include "re2/set.h"

namespace kvcanary::canaries {
namespace {

// RE2's memory cap for the set: the program of 10,000 markers is ~30 MB;
// the rest is lazily built DFA cache, which RE2 flushes when full.
constexpr int64_t kSetMaxMemBytes = int64_t{1} << 30;

static_assert(kWordListSize <= 256, "Entry::words holds uint8_t indices");

// A word of the scanned text: bytes [start, end) and its list index (-1 if
// not a list word).
struct TextWord {
  size_t start;
  size_t end;
  int index;
};

bool IsAsciiLetter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
char ToLowerAscii(char c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// Writes " " + `text` lower-cased + " " into `normalised`, with every byte
// that is not an ASCII letter turned into ' ', and lists the words (offsets
// into `text`). The spaces at both ends let every pattern start and end with
// a literal space, which RE2::Set factors into a trie; "(?:^| )" would not
// factor and costs every DFA state a thread per marker.
void Normalise(absl::string_view text, std::string* normalised,
               std::vector<TextWord>* words) {
  normalised->assign(text.size() + 2, ' ');
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (IsAsciiLetter(c)) (*normalised)[i + 1] = ToLowerAscii(c);
  }
  const absl::string_view body =
      absl::string_view(*normalised).substr(1, text.size());
  size_t i = 0;
  while (i < body.size()) {
    if (body[i] == ' ') {
      ++i;
      continue;
    }
    const size_t start = i;
    while (i < body.size() && body[i] != ' ') ++i;
    words->push_back(
        TextWord{start, i, MarkerWordIndex(body.substr(start, i - start))});
  }
}

// Key of a window of list indices: its first (up to) 8 indices packed. A
// window longer than 8 words shares a key with others of the same first 8;
// Scan() verifies every posting word by word.
template <typename Words>
uint64_t WindowKey(const Words& words, size_t first, int length) {
  uint64_t key = 0;
  for (int j = 0; j < std::min(length, 8); ++j) {
    key = (key << 8) | static_cast<uint64_t>(words[first + j]);
  }
  return key;
}

// The words separated by " +", between literal spaces (see Normalise).
std::string ExactPattern(const std::vector<uint8_t>& words) {
  std::string pattern = " ";
  const auto& list = MarkerWordList();
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) pattern += " +";
    pattern += list[words[i]];
  }
  pattern += " ";
  return pattern;
}

std::string GenericPattern() {
  const std::string any_word =
      absl::StrCat("(?:", absl::StrJoin(MarkerWordList(), "|"), ")");
  return absl::StrCat(" ", any_word, "(?: +", any_word, "){",
                      kGenericMinWords - 1, "} ");
}

}  // namespace

ReferenceMarkerScanner::ReferenceMarkerScanner(int min_partial_words)
    : min_partial_words_(min_partial_words) {
  CHECK(min_partial_words >= 1 && min_partial_words <= kMarkerWords)
      << "min_partial_words " << min_partial_words;
}

ReferenceMarkerScanner::~ReferenceMarkerScanner() = default;

void ReferenceMarkerScanner::Add(const Marker& marker,
                                 absl::string_view owner) {
  CHECK(!compiled_) << "ReferenceMarkerScanner::Add after Compile";
  CHECK(!marker.words.empty()) << marker.id;
  CHECK(marker.text == MarkerText(marker.words)) << marker.id;
  Entry entry;
  entry.id = marker.id;
  entry.owner = std::string(owner);
  entry.words.assign(marker.words.begin(), marker.words.end());
  markers_.push_back(std::move(entry));
}

absl::Status ReferenceMarkerScanner::Compile() {
  CHECK(!compiled_) << "ReferenceMarkerScanner::Compile called twice";
  absl::flat_hash_set<absl::string_view> ids;
  ids.reserve(markers_.size());
  for (const Entry& entry : markers_) {
    if (!ids.insert(entry.id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("marker ", entry.id, " added twice"));
    }
  }

  RE2::Options options;
  options.set_max_mem(kSetMaxMemBytes);
  options.set_log_errors(false);
  auto set = std::make_unique<RE2::Set>(options, RE2::UNANCHORED);
  std::string error;
  for (const Entry& entry : markers_) {
    if (set->Add(ExactPattern(entry.words), &error) < 0) {
      return absl::InternalError(
          absl::StrCat("RE2 rejected marker ", entry.id, ": ", error));
    }
  }
  if (set->Add(GenericPattern(), &error) < 0) {
    return absl::InternalError(
        absl::StrCat("RE2 rejected the generic shape: ", error));
  }
  if (!set->Compile()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("RE2::Set of ", markers_.size(), " markers exceeds ",
                     kSetMaxMemBytes, " bytes"));
  }

  // Postings grouped by window key: count, then place (a CSR layout).
  std::vector<std::pair<uint64_t, Posting>> all;
  for (uint32_t m = 0; m < markers_.size(); ++m) {
    const std::vector<uint8_t>& words = markers_[m].words;
    for (int p = 0; p + min_partial_words_ <= static_cast<int>(words.size());
         ++p) {
      all.push_back({WindowKey(words, p, min_partial_words_),
                     Posting{m, static_cast<uint32_t>(p)}});
    }
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first
                              : a.second.marker < b.second.marker;
  });
  postings_.reserve(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    if (i == 0 || all[i].first != all[i - 1].first) {
      windows_[all[i].first] = {static_cast<uint32_t>(i), 0};
    }
    ++windows_[all[i].first].second;
    postings_.push_back(all[i].second);
  }

  exact_set_ = std::move(set);
  compiled_ = true;
  return absl::OkStatus();
}

// The scanned text's words, and every run of a registered marker found in
// them.
struct ReferenceMarkerScanner::ScanState {
  // Text words [first, first + length) are the marker's words
  // [position, position + length).
  struct Run {
    int first;
    int length;
    int position;
  };

  std::vector<TextWord> words;
  std::vector<int> seq;  // words[i].index
  // Runs per marker, in the order found.
  absl::flat_hash_map<uint32_t, std::vector<Run>> runs;
  // Which text words some registered marker's run covers.
  std::vector<bool> covered;

  // Notes that text words from `first` are `length` words of marker `m`
  // from its word `position`.
  void Record(uint32_t m, int first, int length, int position) {
    runs[m].push_back(Run{first, length, position});
    std::fill(covered.begin() + first, covered.begin() + first + length, true);
  }
  // Whether marker `m` has a run of `length` words.
  bool HasRun(uint32_t m, int length) const {
    auto it = runs.find(m);
    if (it == runs.end()) return false;
    return std::any_of(it->second.begin(), it->second.end(),
                       [length](const Run& r) { return r.length == length; });
  }
  // How many text words from `i` match the marker's words from `p`.
  int RunFrom(const Entry& entry, int i, int p) const {
    const int n = static_cast<int>(seq.size());
    int k = 0;
    while (i + k < n && p + k < static_cast<int>(entry.words.size()) &&
           seq[i + k] == entry.words[p + k]) {
      ++k;
    }
    return k;
  }
};

std::vector<MarkerHit> ReferenceMarkerScanner::Scan(
    absl::string_view text) const {
  CHECK(compiled_)
      << "ReferenceMarkerScanner::Scan before a successful Compile";
  std::string normalised;
  ScanState state;
  Normalise(text, &normalised, &state.words);
  const int n = static_cast<int>(state.words.size());
  state.seq.resize(n);
  for (int i = 0; i < n; ++i) state.seq[i] = state.words[i].index;
  state.covered.assign(n, false);

  std::vector<int> whole_candidates;
  const bool generic_possible = MatchSet(normalised, &whole_candidates);
  FindWindowRuns(&state);
  FindWholeRuns(whole_candidates, &state);

  std::vector<MarkerHit> hits;
  if (generic_possible) AddGenericHit(state, &hits);
  for (const auto& marker_runs : state.runs) {
    hits.push_back(HitOf(marker_runs.first, state));
  }
  std::sort(hits.begin(), hits.end(),
            [](const MarkerHit& a, const MarkerHit& b) {
              return a.marker_id < b.marker_id;
            });
  return hits;
}

MarkerHit ReferenceMarkerScanner::HitOf(uint32_t m,
                                        const ScanState& state) const {
  const Entry& entry = markers_[m];
  const std::vector<TextWord>& words = state.words;
  std::vector<ScanState::Run> runs = state.runs.at(m);
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.position < b.position;
  });
  MarkerHit hit;
  hit.marker_id = entry.id;
  hit.owner = entry.owner;
  for (const ScanState::Run& run : runs) {
    const size_t offset = words[run.first].start;
    hit.runs.push_back(MarkerRun{run.position, run.length, offset,
                                 words[run.first + run.length - 1].end});
    // The longest run, the earliest on ties.
    if (run.length > hit.words_matched) {
      hit.words_matched = run.length;
      hit.offset = offset;
    }
  }
  hit.exact = hit.words_matched == static_cast<int>(entry.words.size());
  return hit;
}

bool ReferenceMarkerScanner::MatchSet(
    const std::string& normalised, std::vector<int>* whole_candidates) const {
  // Exact texts and the generic shape. Should RE2 fail (its DFA cache
  // thrashing), the word pass decides both on its own.
  std::vector<int> matched;
  RE2::Set::ErrorInfo error_info{RE2::Set::kNoError};
  exact_set_->Match(normalised, &matched, &error_info);
  const bool re2_ok = error_info.kind == RE2::Set::kNoError;
  const int generic_pattern = size();
  bool generic_possible = !re2_ok;
  // Markers that may appear whole: RE2's matches, or on failure every
  // marker the window pass cannot see (shorter than a window).
  for (int pattern : matched) {
    if (pattern == generic_pattern) {
      generic_possible = true;
    } else {
      whole_candidates->push_back(pattern);
    }
  }
  if (!re2_ok) {
    for (int m = 0; m < size(); ++m) {
      if (static_cast<int>(markers_[m].words.size()) < min_partial_words_) {
        whole_candidates->push_back(m);
      }
    }
  }
  return generic_possible;
}

void ReferenceMarkerScanner::FindWindowRuns(ScanState* state) const {
  const std::vector<int>& seq = state->seq;
  const int n = static_cast<int>(seq.size());
  int list_run = 0;  // consecutive list words ending at i
  for (int i = 0; i < n; ++i) {
    list_run = seq[i] >= 0 ? list_run + 1 : 0;
    if (list_run < min_partial_words_) continue;
    const int first = i - min_partial_words_ + 1;
    auto it = windows_.find(WindowKey(seq, first, min_partial_words_));
    if (it == windows_.end()) continue;
    for (uint32_t j = it->second.first;
         j < it->second.first + it->second.second; ++j) {
      const Posting& posting = postings_[j];
      const Entry& entry = markers_[posting.marker];
      const int p = static_cast<int>(posting.position);
      // A run that extends to the left was already measured from its start.
      if (first > 0 && p > 0 && seq[first - 1] == entry.words[p - 1]) continue;
      const int k = state->RunFrom(entry, first, p);
      if (k >= min_partial_words_) state->Record(posting.marker, first, k, p);
    }
  }
}

void ReferenceMarkerScanner::FindWholeRuns(
    const std::vector<int>& whole_candidates, ScanState* state) const {
  const int n = static_cast<int>(state->seq.size());
  for (int m : whole_candidates) {
    const Entry& entry = markers_[m];
    const int length = static_cast<int>(entry.words.size());
    // Found whole by the window pass, which finds every run of a marker
    // at least a window long.
    if (state->HasRun(m, length)) continue;
    for (int i = 0; i + length <= n; ++i) {
      if (state->RunFrom(entry, i, 0) == length) state->Record(m, i, length, 0);
    }
  }
}

void ReferenceMarkerScanner::AddGenericHit(const ScanState& state,
                                           std::vector<MarkerHit>* hits) {
  const int n = static_cast<int>(state.seq.size());
  int best_length = 0, best_first = 0, run = 0;
  for (int i = 0; i <= n; ++i) {
    if (i < n && state.seq[i] >= 0 && !state.covered[i]) {
      ++run;
      continue;
    }
    if (run > best_length) best_length = run, best_first = i - run;
    run = 0;
  }
  if (best_length >= kGenericMinWords) {
    MarkerHit hit;
    hit.words_matched = best_length;
    hit.offset = state.words[best_first].start;
    hits->push_back(std::move(hit));
  }
}

}  // namespace kvcanary::canaries
