#include "canaries/scanner.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace kvcanary::canaries {
namespace {

static_assert(kWordListSize <= 256, "Entry::words holds uint8_t indices");
static_assert(kMarkerWords < 256, "a window's length fits the key's top byte");

// Words of a window that its key holds; a longer window shares its key
// with others of the same first words, and every posting is verified word
// by word.
constexpr int kKeyWords = 7;

// Key of the window of `length` words whose j-th list index is
// index_at(j): the length in the top byte, the first (up to) 7 indices
// below it.
template <typename IndexAt>
uint64_t WindowKey(int length, IndexAt index_at) {
  uint64_t key = static_cast<uint64_t>(length) << 56;
  for (int j = 0; j < std::min(length, kKeyWords); ++j) {
    key |= static_cast<uint64_t>(index_at(j)) << (8 * j);
  }
  return key;
}

}  // namespace

MarkerScanner::MarkerScanner(int min_partial_words)
    : min_partial_words_(min_partial_words) {
  CHECK(min_partial_words >= 1 && min_partial_words <= kMarkerWords)
      << "min_partial_words " << min_partial_words;
}

MarkerScanner::~MarkerScanner() = default;

void MarkerScanner::Add(const Marker& marker, absl::string_view owner) {
  CHECK(!compiled_) << "MarkerScanner::Add after Compile";
  CHECK(!marker.words.empty()) << marker.id;
  CHECK(marker.text == MarkerText(marker.words)) << marker.id;
  Entry entry;
  entry.id = marker.id;
  entry.owner = std::string(owner);
  entry.words.assign(marker.words.begin(), marker.words.end());
  markers_.push_back(std::move(entry));
}

absl::Status MarkerScanner::Compile() {
  CHECK(!compiled_) << "MarkerScanner::Compile called twice";
  absl::flat_hash_set<absl::string_view> ids;
  ids.reserve(markers_.size());
  for (const Entry& entry : markers_) {
    if (!ids.insert(entry.id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("marker ", entry.id, " added twice"));
    }
  }

  // Each marker's windows: min_partial_words long, or the whole marker if
  // it is shorter. Postings grouped by key: sort, then place (CSR).
  std::vector<std::pair<uint64_t, Posting>> all;
  for (uint32_t m = 0; m < markers_.size(); ++m) {
    const std::vector<uint8_t>& words = markers_[m].words;
    const int size = static_cast<int>(words.size());
    const int length = std::min(min_partial_words_, size);
    window_lengths_.push_back(length);
    for (int p = 0; p + length <= size; ++p) {
      const uint64_t key =
          WindowKey(length, [&](int j) { return words[p + j]; });
      all.push_back({key, Posting{m, static_cast<uint32_t>(p)}});
    }
  }
  std::sort(window_lengths_.begin(), window_lengths_.end());
  window_lengths_.erase(
      std::unique(window_lengths_.begin(), window_lengths_.end()),
      window_lengths_.end());
  if (!window_lengths_.empty()) {
    min_run_words_ = std::min(window_lengths_.front(), kGenericMinWords);
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
  compiled_ = true;
  return absl::OkStatus();
}

// One Scan()'s findings so far.
struct MarkerScanner::ScanState {
  // Runs per marker, in the order found.
  absl::flat_hash_map<uint32_t, std::vector<MarkerRun>> runs;
  // The longest stretch of consecutive list words no run covers, the
  // earliest on ties.
  int generic_words = 0;
  size_t generic_offset = 0;
};

std::vector<MarkerHit> MarkerScanner::Scan(absl::string_view text) const {
  CHECK(compiled_) << "MarkerScanner::Scan before a successful Compile";
  ScanState state;
  ForEachListWordRun(text, min_run_words_,
                     [this, &state](absl::Span<const ListWord> run) {
                       MatchRun(run, &state);
                     });
  std::vector<MarkerHit> hits;
  if (state.generic_words >= kGenericMinWords) {
    MarkerHit hit;
    hit.words_matched = state.generic_words;
    hit.offset = state.generic_offset;
    hits.push_back(std::move(hit));
  }
  for (auto& marker_runs : state.runs) {
    hits.push_back(HitOf(marker_runs.first, std::move(marker_runs.second)));
  }
  std::sort(hits.begin(), hits.end(),
            [](const MarkerHit& a, const MarkerHit& b) {
              return a.marker_id < b.marker_id;
            });
  return hits;
}

void MarkerScanner::MatchRun(absl::Span<const ListWord> run,
                             ScanState* state) const {
  const int n = static_cast<int>(run.size());
  // Which words of the run some marker's run covers.
  absl::InlinedVector<bool, 32> covered(n, false);
  for (int length : window_lengths_) {
    if (length > n) break;
    for (int i = 0; i + length <= n; ++i) {
      MatchWindow(run, i, length, state, covered.data());
    }
  }
  if (n < kGenericMinWords) return;
  int stretch = 0;  // uncovered words ending at i
  for (int i = 0; i <= n; ++i) {
    if (i < n && !covered[i]) {
      ++stretch;
      continue;
    }
    if (stretch > state->generic_words) {
      state->generic_words = stretch;
      state->generic_offset = run[i - stretch].start;
    }
    stretch = 0;
  }
}

void MarkerScanner::MatchWindow(absl::Span<const ListWord> run, int i,
                                int length, ScanState* state,
                                bool* covered) const {
  const auto it =
      windows_.find(WindowKey(length, [&](int j) { return run[i + j].index; }));
  if (it == windows_.end()) return;
  const int n = static_cast<int>(run.size());
  for (uint32_t j = it->second.first; j < it->second.first + it->second.second;
       ++j) {
    const Posting& posting = postings_[j];
    const std::vector<uint8_t>& words = markers_[posting.marker].words;
    const int p = static_cast<int>(posting.position);
    // A run that extends to the left was already measured from its start.
    if (i > 0 && p > 0 && run[i - 1].index == words[p - 1]) continue;
    int k = 0;
    while (i + k < n && p + k < static_cast<int>(words.size()) &&
           run[i + k].index == words[p + k]) {
      ++k;
    }
    if (k < length) continue;  // a longer window's key matched, not it
    state->runs[posting.marker].push_back(
        MarkerRun{p, k, run[i].start, run[i + k - 1].end});
    std::fill(covered + i, covered + i + k, true);
  }
}

MarkerHit MarkerScanner::HitOf(uint32_t m, std::vector<MarkerRun> runs) const {
  const Entry& entry = markers_[m];
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) {
    return a.offset != b.offset ? a.offset < b.offset
                                : a.marker_word < b.marker_word;
  });
  MarkerHit hit;
  hit.marker_id = entry.id;
  hit.owner = entry.owner;
  for (const MarkerRun& run : runs) {
    // The longest run, the earliest on ties.
    if (run.words > hit.words_matched) {
      hit.words_matched = run.words;
      hit.offset = run.offset;
    }
  }
  hit.exact = hit.words_matched == static_cast<int>(entry.words.size());
  hit.runs = std::move(runs);
  return hit;
}

}  // namespace kvcanary::canaries
