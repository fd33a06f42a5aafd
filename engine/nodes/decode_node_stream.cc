// The decode node's NDJSON stream to the router, once a request's K/V are
// installed: what the prefill node reported, a line per batch of tokens
// (with their log-probabilities), then the final line with the counts and
// this node's outcome. The router reads it in token_relay.h.
#include <memory>
#include <string>
#include <utility>

#include "engine/nodes/decode_node.h"
#include "engine/nodes/logprobs_wire.h"
#include "engine/nodes/node_common.h"

namespace kvcanary::engine {
namespace {

std::string NdjsonLine(const nlohmann::json& j) { return j.dump() + "\n"; }

// The NDJSON line for a tokens or finished event. The request's first
// token's log-probabilities came from the prefill node (`first`), the
// others are this node's.
nlohmann::json EventLine(const RequestEvent& event, int prompt_tokens,
                         int cached_tokens, const nlohmann::json& first) {
  nlohmann::json line;
  if (event.kind == RequestEvent::Kind::kTokens) {
    line["tokens"] = event.tokens;
    if (!event.logprobs.empty()) {
      nlohmann::json logprobs = LogprobsToJson(event.logprobs);
      if (event.logprobs[0].token < 0) logprobs[0] = first;
      line["logprobs"] = std::move(logprobs);
    }
    return line;
  }
  line["finish_reason"] = FinishReasonName(event.reason);
  line["prompt_tokens"] = prompt_tokens;
  line["completion_tokens"] = event.num_output_tokens;
  line["violations"] = event.violations.size();
  line["cached_tokens"] = cached_tokens;
  line["decode_outcome"] = OutcomeText(event.status);
  if (!event.status.ok()) {
    line["error"] =
        nlohmann::json::parse(InternalErrorBody(event.status))["error"];
  }
  return line;
}

}  // namespace

void DecodeNode::StreamDecoding(http::Response& res,
                                std::shared_ptr<RequestChannel> channel,
                                RequestId id, int prompt_tokens,
                                const PrefillAnswer& prefill) {
  // Decoding: stream NDJSON lines until finished: first what the prefill
  // node reported, then the tokens, then the final line.
  nlohmann::json first_line = {{"prefill_outcome", prefill.outcome},
                               {"cached_tokens", prefill.cached_tokens}};
  if (!prefill.prompt_logprobs.is_null()) {
    first_line["prompt_logprobs"] = prefill.prompt_logprobs;
  }
  const std::string prefill_line = NdjsonLine(first_line);
  const int cached_tokens = prefill.cached_tokens;
  const nlohmann::json first_logprobs = prefill.first_logprobs;
  auto counted = std::make_shared<bool>(false);  // the final line's outcome
  res.set_chunked_content_provider(
      "application/x-ndjson",
      [this, channel, id, prompt_tokens, cached_tokens, prefill_line, counted,
       first_logprobs,
       prefill_sent = false](size_t, http::DataSink& sink) mutable {
        auto gone = [&] {
          loop_.Abort(id, absl::CancelledError("router went away"));
          return false;
        };
        if (!prefill_sent) {
          prefill_sent = true;
          if (!sink.write(prefill_line.data(), prefill_line.size())) {
            return gone();
          }
        }
        auto event = channel->Wait(absl::Milliseconds(200));
        if (!event.has_value()) return sink.is_writable() ? true : gone();
        if (event->kind != RequestEvent::Kind::kTokens &&
            event->kind != RequestEvent::Kind::kFinished) {
          return true;
        }
        const std::string text = NdjsonLine(
            EventLine(*event, prompt_tokens, cached_tokens, first_logprobs));
        if (event->kind == RequestEvent::Kind::kFinished) {
          metrics_.CountRequest(event->status);
          *counted = true;
          metrics_.CountViolations(event->violations);
        }
        if (!sink.write(text.data(), text.size())) return gone();
        if (event->kind == RequestEvent::Kind::kFinished) sink.done();
        return true;
      },
      [this, id, counted](bool success) {
        if (!success) loop_.Abort(id, absl::CancelledError("router went away"));
        // Gone before the final line: requests_total{outcome="cancelled"}.
        if (!*counted) metrics_.CountRequest(absl::CancelledError(""));
      });
}

}  // namespace kvcanary::engine
