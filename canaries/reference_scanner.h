// The RE2 scanner that MarkerScanner replaced, kept as the oracle of the
// differential test (tests/canaries/scanner_differential_test.cc) and as
// the benchmark's anchor (kvcanary-bench-auditor): an RE2::Set over every
// marker's exact text and the generic shape, and a window index over the
// normalised words. Same contract and same findings as MarkerScanner
// (canaries/scanner.h, docs/canaries.md: words, normalisation, hits); it is
// slower (60-140 MB/s against 10,000 markers) and needs ~1 s and ~130 MB to
// compile them. Not used by the auditor.
#ifndef KVCANARY_CANARIES_REFERENCE_SCANNER_H_
#define KVCANARY_CANARIES_REFERENCE_SCANNER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "canaries/marker.h"
#include "canaries/scanner.h"
#include "re2/set.h"

namespace kvcanary::canaries {

// Usage: Add() every active marker, Compile() once, then Scan() from any
// number of threads. Add() after Compile() and Scan() before a successful
// Compile() are programming errors (CHECKed). Scan() is const and
// thread-safe after Compile(); Add() and Compile() are not thread-safe.
class ReferenceMarkerScanner {
 public:
  // Partial runs shorter than min_partial_words words are ignored.
  // REQUIRES: 1 <= min_partial_words <= kMarkerWords (CHECKed).
  explicit ReferenceMarkerScanner(
      int min_partial_words = kDefaultMinPartialWords);
  ~ReferenceMarkerScanner();
  ReferenceMarkerScanner(const ReferenceMarkerScanner&) = delete;
  ReferenceMarkerScanner& operator=(const ReferenceMarkerScanner&) = delete;

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

#endif  // KVCANARY_CANARIES_REFERENCE_SCANNER_H_
