// What an OpenAI-style completion probe got back: the text, the reported
// prompt tokens and the timings, from a plain JSON body or an SSE stream.
#ifndef KVCANARY_AUDITOR_COMPLETION_H_
#define KVCANARY_AUDITOR_COMPLETION_H_

#include <string>

#include "absl/status/status.h"
#include "auditor/multi_client.h"

namespace kvcanary::auditor {

// What a completion probe got back.
struct Completion {
  int status = 0;
  bool usable = false;  // a 200 with a well-formed completion
  std::string text;
  int prompt_tokens = -1;
  double ttft_ms = 0;
  double total_ms = 0;
  absl::Status error;  // transport error, or why the body is not usable
};

// Parses `r` (`stream`: an SSE stream ending in [DONE]). A 200 without a
// completion (or a stream without [DONE]) is not usable, with the reason.
Completion ParseCompletion(const ProbeResponse& r, bool stream);

// ok, bad_response, http_4xx, http_5xx or transport_error.
std::string Outcome(const Completion& c);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_COMPLETION_H_
