// Log-probabilities between the nodes (prefill answer -> decode node ->
// router), as compact JSON: a position is [token, logprob, [[id, logprob],
// ...]]. Floats travel as JSON numbers with 17 significant digits, so a
// value read back is bitwise the float that was written.
#ifndef KVCANARY_ENGINE_NODES_LOGPROBS_WIRE_H_
#define KVCANARY_ENGINE_NODES_LOGPROBS_WIRE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/logprobs.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {

nlohmann::json LogprobsToJson(const std::vector<TokenLogprobs>& positions);

// The positions in `j` (an array as LogprobsToJson writes it); kDataLoss
// naming `what` for anything else: a token outside [0, vocab_size), more
// than kMaxTopLogprobs alternatives, a logprob that is not a number <= 0.
// With `null_is_unknown`, a null element (a position the sender could not
// vouch for) reads as token -1.
absl::StatusOr<std::vector<TokenLogprobs>> LogprobsFromJson(
    const nlohmann::json& j, int vocab_size, const char* what,
    bool null_is_unknown = false);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_LOGPROBS_WIRE_H_
