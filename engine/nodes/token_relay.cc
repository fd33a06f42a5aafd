#include "engine/nodes/token_relay.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/nodes/logprobs_wire.h"
#include "engine/nodes/node_common.h"

namespace kvcanary::engine {

TokenRelay::TokenRelay(std::shared_ptr<DecodeStream> stream,
                       const Tokenizer* tokenizer, RelayOptions options,
                       std::shared_ptr<AccessRecord> record)
    : stream_(std::move(stream)),
      tokenizer_(tokenizer),
      options_(std::move(options)),
      stop_(options_.stop),
      prev_token_(options_.prompt.back()),
      record_(std::move(record)) {}

void TokenRelay::Fail(absl::Status status) {
  error_ = std::move(status);
  finished_ = true;
  stream_->Cancel();
}

bool TokenRelay::Next(CompletionResult* r, std::string* delta,
                      std::vector<LogprobEntry>* logprobs) {
  delta->clear();
  const size_t positions_before = logprobs->size();
  auto some = [&] {
    return !delta->empty() || logprobs->size() > positions_before;
  };
  while (!finished_) {
    auto line = stream_->Next();
    if (!line.has_value()) {
      error_ = stream_->transport();
      finished_ = true;
      break;
    }
    if (line->contains("tokens")) {
      if (!record_->ttft_ms.has_value()) {
        record_->ttft_ms =
            absl::ToDoubleMilliseconds(absl::Now() - record_->start);
      }
      if (!AppendTokens(*line, r, delta, logprobs)) return false;
      if (some()) return true;
      continue;
    }
    if (!line->contains("finish_reason")) {
      ReadPrefill(*line, r, delta, logprobs);
      if (!error_.ok()) return false;
      if (some()) return true;
      continue;
    }
    finished_ = true;
    *delta += stop_.Flush();
    r->finish_reason =
        line->value("finish_reason", "") == "length" ? "length" : "stop";
    record_->decode_outcome = OptionalString(*line, "decode_outcome");
    if (line->contains("error")) {
      error_ = StatusFromInternalResponse(
          500, nlohmann::json{{"error", (*line)["error"]}}.dump());
    }
  }
  return some();
}

LogprobEntry TokenRelay::Render(int prev, int token,
                                const TokenLogprobs& p) const {
  LogprobEntry e;
  e.token = tokenizer_->DecodeForPrint(prev, token);
  if (p.token != token) return e;  // none, or about another token
  e.logprob = p.logprob;
  for (const auto& [id, lp] : p.top) {
    e.top.emplace_back(tokenizer_->DecodeForPrint(prev, id), lp);
  }
  return e;
}

bool TokenRelay::AppendTokens(const nlohmann::json& line, CompletionResult* r,
                              std::string* delta,
                              std::vector<LogprobEntry>* logprobs) {
  const nlohmann::json& tokens = line["tokens"];
  std::vector<TokenLogprobs> positions;
  if (options_.logprobs >= 0) {
    auto read =
        line.contains("logprobs")
            ? LogprobsFromJson(line["logprobs"], tokenizer_->vocab_size(),
                               "logprobs", /*null_is_unknown=*/true)
            : absl::DataLossError("no logprobs");
    if (!read.ok() || read->size() != tokens.size()) {
      Fail(absl::DataLossError(
          "the decode node's log-probabilities do not match its tokens"));
      return false;
    }
    positions = *std::move(read);
  }
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int token = tokens[i].get<int>();
    if (!positions.empty()) {
      logprobs->push_back(Render(prev_token_, token, positions[i]));
    }
    text += tokenizer_->DecodeForPrint(prev_token_, token);
    prev_token_ = token;
    ++r->completion_tokens;
  }
  record_->completion_tokens = r->completion_tokens;
  StopMatcher::Emit emit = stop_.Feed(text);
  *delta += emit.text;
  if (emit.stopped) {
    // The router ends the request itself: the decode node's final line
    // (and its outcome) will not come.
    r->finish_reason = "stop";
    finished_ = true;
    stream_->Cancel();
  }
  return true;
}

void TokenRelay::ReadPrefill(const nlohmann::json& line, CompletionResult* r,
                             std::string* delta,
                             std::vector<LogprobEntry>* logprobs) {
  if (line.contains("cached_tokens") &&
      line["cached_tokens"].is_number_unsigned()) {
    r->cached_tokens = line["cached_tokens"].get<int>();
    record_->cached_tokens = r->cached_tokens;
  }
  record_->prefill_outcome = OptionalString(line, "prefill_outcome");
  if (!options_.echo) return;
  *delta += options_.prompt_text;
  if (options_.logprobs < 0) return;
  auto positions =
      line.contains("prompt_logprobs")
          ? LogprobsFromJson(line["prompt_logprobs"], tokenizer_->vocab_size(),
                             "prompt_logprobs",
                             /*null_is_unknown=*/true)
          : absl::DataLossError("no prompt_logprobs");
  if (!positions.ok()) {
    Fail(absl::DataLossError(
        "the prefill node returned no valid prompt log-probabilities"));
    return;
  }
  // Position i is prompt[i + 1]'s, after prompt[i]. The prompt tokens the
  // prefill node really computed: fewer than the prompt's when it cut it.
  const std::vector<int>& prompt = options_.prompt;
  for (size_t i = 0; i < positions->size() && i + 1 < prompt.size(); ++i) {
    logprobs->push_back(Render(prompt[i], prompt[i + 1], (*positions)[i]));
  }
}

}  // namespace kvcanary::engine
