// Finds registered canary markers, whole or in part, in model output.
//
// Text is normalised before matching: ASCII letters are lower-cased and
// every other byte (space, punctuation, digit, line break, any non-ASCII
// byte) separates words. So "Apple, BALL!\nbird" holds the words
// "apple ball bird", and the capitals, punctuation and line breaks a model
// adds do not matter.
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
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "canaries/marker.h"
#include "re2/set.h"

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

  // Builds an RE2::Set over every marker's exact text (whole words, any run
  // of separators between them) plus the generic marker shape, and the
  // partial-run index (each min_partial_words-word window of each marker ->
  // its postings). Both see the same normalised text, so a whole marker is
  // also its own full-length run; the set finds markers shorter than a
  // window (nonces) and gates the generic check. kInvalidArgument if two
  // markers share an id; kResourceExhausted / kInternal if RE2 rejects the
  // set. 10,000 markers: ~1 s, ~130 MB.
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
  struct ScanState;  // one Scan()'s words and runs (scanner.cc)

  // Runs the RE2 set: appends the markers that may appear whole to
  // *whole_candidates; returns whether the generic shape may appear.
  bool MatchSet(const std::string& normalised,
                std::vector<int>* whole_candidates) const;
  // Records the partial runs found through the window index.
  void FindWindowRuns(ScanState* state) const;
  // Records where each candidate not yet found whole appears whole.
  void FindWholeRuns(const std::vector<int>& whole_candidates,
                     ScanState* state) const;
  // The hit of marker `m`, which has runs in `state`.
  MarkerHit HitOf(uint32_t m, const ScanState& state) const;
  // Appends the generic hit: the longest run of list words no run covers.
  static void AddGenericHit(const ScanState& state,
                            std::vector<MarkerHit>* hits);

  const int min_partial_words_;
  std::vector<Entry> markers_;
  bool compiled_ = false;
  // Exact patterns 0..size()-1 (pattern i = markers_[i]); then the generic
  // shape, pattern index size().
  std::unique_ptr<RE2::Set> exact_set_;
  // Window key -> postings_[first, first + count).
  absl::flat_hash_map<uint64_t, std::pair<uint32_t, uint32_t>> windows_;
  std::vector<Posting> postings_;
};

}  // namespace kvcanary::canaries

#endif  // KVCANARY_CANARIES_SCANNER_H_
