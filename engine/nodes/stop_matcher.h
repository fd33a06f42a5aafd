// Stop strings (the request's `stop`) found in generated text that arrives
// in pieces, so the client never sees one. No I/O.
#ifndef KVCANARY_ENGINE_NODES_STOP_MATCHER_H_
#define KVCANARY_ENGINE_NODES_STOP_MATCHER_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kvcanary::engine {

// Finds stop strings in text that arrives in pieces, so that no emitted text
// ever contains (the start of) a stop string. The result does not depend on
// how the text is split into Feed() calls: a stop is found where it first
// ends (the earliest-starting one if several end at the same byte), as if
// text were fed a byte at a time. Not thread-safe; one per request.
class StopMatcher {
 public:
  struct Emit {
    std::string text;  // safe to send to the client now
    bool stopped;      // a stop string matched; `text` ends just before it
  };

  // REQUIRES: no stop string is empty (CHECKed; ParseCompletionRequest
  // rejects them).
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends generated text. Holds back the longest suffix that is a proper
  // prefix of some stop string. After a stop matched, returns {"", true}.
  Emit Feed(absl::string_view text);
  // The held-back text, at the end of generation when no stop matched; ""
  // after a stop matched.
  std::string Flush();

  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // held back: a prefix of some stop string
  bool stopped_ = false;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_STOP_MATCHER_H_
