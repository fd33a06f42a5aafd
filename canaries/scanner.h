// Finds registered canary markers, whole or in part, in model output.
//
// Matching is by word (canaries/list_words.h): a word is a maximal run of
// ASCII letters, compared lower-cased; every other byte (space,
// punctuation, digit, line break, NUL, each byte of a non-ASCII
// character) separates words. So "Apple, BALL!\nbird" holds the words
// "apple ball bird", and the capitals, punctuation and line breaks a model
// adds do not matter; "cakes" is not "cake".
//
// Three kinds of hit (docs/canaries.md):
//   exact   the whole text of a registered marker, word for word;
//   partial a run of >= min_partial_words consecutive words of a registered
//           marker, in order (a model that copies only part of a marker);
//   generic a run of >= kGenericMinWords consecutive list words that no
//           registered marker explains: a marker of a campaign this scanner
//           does not know (marker_id "").
//
// Partial runs trade sensitivity for false positives: with 10,000
// registered markers almost every pair of list words is some marker's
// pair, so runs of 2 match ordinary text; kDefaultMinPartialWords is the
// shortest run with no false positive in sampled model output
// (docs/canaries.md has the figures and how they were measured).
#ifndef KVCANARY_CANARIES_SCANNER_H_
#define KVCANARY_CANARIES_SCANNER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "canaries/list_words.h"
#include "canaries/marker.h"

namespace kvcanary::canaries {

// Default for MarkerScanner's min_partial_words. Runs of 2 are useless
// against 10,000 markers (90% of all word pairs belong to some marker; 2.4%
// of sampled stories260K completions gave a false hit); no run of 3 matched
// in 3,008 completions, and the derived rate is ~6e-6 per 256-token
// completion (docs/canaries.md).
inline constexpr int kDefaultMinPartialWords = 3;

// Shortest run of list words reported as a generic (unregistered) marker
// shape: half a marker, 64 bits. The longest run of list words in 3,008
// sampled stories260K completions was 3 (docs/canaries.md).
inline constexpr int kGenericMinWords = kMarkerWords / 2;

// One run of a registered marker's consecutive words in the scanned text.
struct MarkerRun {
  int marker_word = 0;  // index in the marker of the run's first word
  int words = 0;        // length of the run
  size_t offset = 0;    // byte offset of the run's first word in the text
  size_t end = 0;       // byte offset just past the run's last word
};

struct MarkerHit {
  std::string marker_id;  // "" for a generic-shape hit
  std::string owner;      // as given to Add(); "" for a generic-shape hit
  // Length of the longest in-order run of the marker's consecutive words
  // found in the text (generic: length of the unexplained run of list
  // words).
  int words_matched = 0;
  bool exact = false;  // the whole marker text appears
  size_t offset = 0;   // byte offset of the longest run's first word
  // Every run of the marker in the text (each at least min_partial_words
  // long, or the whole marker), in text order; empty for a generic-shape
  // hit. Markers that share a window each have a run on the same words, so
  // a caller can tell which runs another marker also explains.
  std::vector<MarkerRun> runs;
};

// Usage: Add() every active marker, Compile() once, then Scan() from any
// number of threads. Add() after Compile() and Scan() before a successful
// Compile() are programming errors (CHECKed). Scan() is const and
// thread-safe after Compile(); Add() and Compile() are not thread-safe.
//
// How: markers are sequences of list words, so the scan is by word. One
// pass over the text finds its words and their list indices
// (canaries/list_words.h); only runs of consecutive list words long enough
// to hold a window or a generic shape are looked at further, each window
// of such a run looked up in a hash of every marker's windows. Same
// findings as ReferenceMarkerScanner, the RE2 scanner it replaced
// (canaries/reference_scanner.h; the differential test holds them equal).
class MarkerScanner {
 public:
  // Partial runs shorter than min_partial_words words are ignored.
  // REQUIRES: 1 <= min_partial_words <= kMarkerWords (CHECKed).
  explicit MarkerScanner(int min_partial_words = kDefaultMinPartialWords);
  ~MarkerScanner();
  MarkerScanner(const MarkerScanner&) = delete;
  MarkerScanner& operator=(const MarkerScanner&) = delete;

  // Registers a marker (or a nonce) with an opaque owner, returned in hits.
  // REQUIRES: not compiled yet; marker.words non-empty, each a valid list
  // index, and marker.text == MarkerText(marker.words) (all CHECKed).
  void Add(const Marker& marker, absl::string_view owner);

  // Builds the window index: each min_partial_words-word window of each
  // marker at least that long, and the whole of each shorter marker (a
  // nonce under a larger min_partial_words), -> its postings (marker,
  // position). kInvalidArgument if two markers share an id. 10,000
  // markers: ~25 ms, ~5 MB.
  absl::Status Compile();

  // At most one hit per registered marker (words_matched and offset from
  // its longest run, the earliest on ties; all its runs in `runs`) plus at
  // most one generic-shape hit, sorted by marker_id (the generic hit, id "",
  // first). Every marker with a run is reported, also where several share
  // the same words. An exact hit is reported whatever min_partial_words
  // is. REQUIRES: Compile() succeeded (CHECKed).
  std::vector<MarkerHit> Scan(absl::string_view text) const;

  // Number of registered markers.
  int size() const { return static_cast<int>(markers_.size()); }

 private:
  struct Entry {
    std::string id;
    std::string owner;
    std::vector<uint8_t> words;  // list indices
  };
  // One window of a marker: the window's first word is markers_[marker]
  // .words[position].
  struct Posting {
    uint32_t marker;
    uint32_t position;
  };
  struct ScanState;  // one Scan()'s runs so far (scanner.cc)

  // Records the runs of registered markers in `run`, consecutive list
  // words of the text, and the longest stretch of it no marker explains.
  void MatchRun(absl::Span<const ListWord> run, ScanState* state) const;
  // Records the runs that start with the window of `length` words at run[i].
  void MatchWindow(absl::Span<const ListWord> run, int i, int length,
                   ScanState* state, bool* covered) const;
  // The hit of marker `m` from its runs.
  MarkerHit HitOf(uint32_t m, std::vector<MarkerRun> runs) const;

  const int min_partial_words_;
  std::vector<Entry> markers_;
  bool compiled_ = false;
  // The window lengths in use, ascending: min_partial_words for markers
  // at least that long, the length of each shorter one.
  std::vector<int> window_lengths_;
  // The shortest run of list words that can hold a window or a generic
  // shape.
  int min_run_words_ = kGenericMinWords;
  // Window key (length, first words) -> postings_[first, first + count).
  absl::flat_hash_map<uint64_t, std::pair<uint32_t, uint32_t>> windows_;
  std::vector<Posting> postings_;
};

}  // namespace kvcanary::canaries

#endif  // KVCANARY_CANARIES_SCANNER_H_
