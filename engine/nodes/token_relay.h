// The router's reader of one request's NDJSON stream from its decode node:
//   {"prefill_outcome", "cached_tokens", "prompt_logprobs"?}  once the
//                                         prompt's K/V are in
//   {"tokens": [...], "logprobs"?: [...]}  as they are generated
//   {"finish_reason", ..., "decode_outcome", "error"?}  at the end
// turned into the client's text (stop strings applied), its positions'
// log-probabilities (engine/nodes/logprobs_wire.h, checked here), and what
// the access record notes of the nodes' reports.
//
// Not thread-safe: one caller at a time (the handler, then the streaming
// provider).
#ifndef KVCANARY_ENGINE_NODES_TOKEN_RELAY_H_
#define KVCANARY_ENGINE_NODES_TOKEN_RELAY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/logprobs.h"
#include "engine/model/tokenizer.h"
#include "engine/nodes/access_log.h"
#include "engine/nodes/decode_stream.h"
#include "engine/nodes/openai_api.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {

struct RelayOptions {
  std::vector<std::string> stop;
  std::vector<int> prompt;  // as tokenized, BOS first
  std::string prompt_text;  // echoed with `echo`
  bool echo = false;
  int logprobs = -1;  // -1: none asked for
};

class TokenRelay {
 public:
  TokenRelay(std::shared_ptr<DecodeStream> stream, const Tokenizer* tokenizer,
             RelayOptions options, std::shared_ptr<AccessRecord> record);

  // The next piece for the client: text in *delta, the positions it
  // covers appended to *logprobs (with `echo`, the prompt first). A
  // position may come before its text, which a stop string's prefix holds
  // back. False at the end (*r filled; error() says whether it failed).
  bool Next(CompletionResult* r, std::string* delta,
            std::vector<LogprobEntry>* logprobs);
  const absl::Status& error() const { return error_; }
  void Cancel() { stream_->Cancel(); }

 private:
  // A "tokens" line; false if it is malformed (error_ set).
  bool AppendTokens(const nlohmann::json& line, CompletionResult* r,
                    std::string* delta, std::vector<LogprobEntry>* logprobs);
  // The first line: what the prefill node reported, and with `echo` the
  // prompt's text and positions.
  void ReadPrefill(const nlohmann::json& line, CompletionResult* r,
                   std::string* delta, std::vector<LogprobEntry>* logprobs);
  // Position `p` as the client sees it after `prev`; `token` is the one
  // the stream holds there (its logprob is given only if p is about it).
  LogprobEntry Render(int prev, int token, const TokenLogprobs& p) const;
  void Fail(absl::Status status);

  std::shared_ptr<DecodeStream> stream_;
  const Tokenizer* tokenizer_;
  RelayOptions options_;
  StopMatcher stop_;
  int prev_token_;
  std::shared_ptr<AccessRecord> record_;
  absl::Status error_;
  bool finished_ = false;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_TOKEN_RELAY_H_
