// The router's relay of an admitted request: each choice started on a
// decode node that is up (which asks a prefill node of its own), the
// client's hang-up watched until the first token, and the decode nodes'
// answers relayed to the client as one JSON body or as SSE chunks, round
// robin over the choices, then logged.
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "engine/nodes/decode_stream.h"
#include "engine/nodes/node_common.h"
#include "engine/nodes/openai_errors.h"
#include "engine/nodes/openai_request.h"
#include "engine/nodes/openai_responses.h"
#include "engine/nodes/router.h"
#include "engine/nodes/router_admission.h"
#include "engine/nodes/token_relay.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {

std::string Router::DecodeRequestBody(const Admitted& a, int choice) const {
  const CompletionRequest& request = a.request;
  nlohmann::json body;
  body["request_id"] = a.choice_ids[choice];
  body["tenant_id"] = a.tenant.value();
  if (!request.cache_salt.empty()) body["cache_salt"] = request.cache_salt;
  body["prompt"] = a.prompt;
  body["max_tokens"] = request.max_tokens;
  body["temperature"] = request.temperature;
  body["top_p"] = request.top_p;
  // Choice i samples with seed + i (seed 0 when none was given): the
  // choices differ, and each is reproducible.
  if (request.seed.has_value() || choice > 0) {
    body["seed"] = request.seed.value_or(0) + static_cast<uint64_t>(choice);
  }
  if (request.logprobs >= 0) body["logprobs"] = request.logprobs;
  if (request.echo && request.logprobs >= 0) body["prompt_logprobs"] = true;
  return body.dump();
}

CompletionResult Router::NewResult(const Admitted& a) const {
  CompletionResult result;
  result.id =
      absl::StrCat(a.request.chat ? "chatcmpl-" : "cmpl-", a.request_id);
  result.model = options_.model_name;
  result.created = absl::ToUnixSeconds(absl::Now());
  result.prompt_tokens = static_cast<int>(a.prompt.size());
  return result;
}

absl::StatusOr<std::shared_ptr<DecodeStream>> Router::StartDecode(
    const Admitted& a, int choice) {
  // Nodes that are down are skipped; none of a role up: 503 naming it.
  ASSIGN_OR_RETURN(const NodeHealth::Route route,
                   health_->Pick(next_node_.fetch_add(1)));
  // The decode node asks a prefill node of its own configuration.
  return std::make_shared<DecodeStream>(
      route.decode_url, options_.internal_secret.AuthorizationHeader(),
      DecodeRequestBody(a, choice), options_.node_timeout, pool_.get());
}

bool Router::AwaitDecode(DecodeStream& stream, http::Response& res,
                         AccessRecord* record,
                         const std::function<bool()>& client_gone) {
  absl::Status started;
  {
    const HangupWatch::Scope watch =
        hangups_.Watch(client_gone, [&stream] { stream.Cancel(); });
    started = stream.WaitHeaders();
    if (watch.fired()) {
      started =
          absl::CancelledError("the client hung up before its first token");
    }
  }
  if (absl::IsCancelled(started)) {
    // Nothing was sent: logged as nginx logs it (499, client closed
    // request); the response goes nowhere.
    metrics_.CountRequest(started);
    record->status = 499;
    record->reason = "client_disconnected";
    Log(record);
    return false;
  }
  if (!started.ok()) {
    // What each node reported, if the decode node answered.
    const nlohmann::json error = stream.error_json();
    record->prefill_outcome = OptionalString(error, "prefill_outcome");
    record->decode_outcome = OptionalString(error, "decode_outcome");
    Fail(started, res, record);
    return false;
  }
  return true;
}

std::vector<std::shared_ptr<TokenRelay>> Router::OpenChoices(
    const Admitted& a, http::Response& res,
    const std::shared_ptr<AccessRecord>& record,
    const std::function<bool()>& client_gone) {
  const CompletionRequest& request = a.request;
  std::vector<std::shared_ptr<DecodeStream>> streams;
  auto give_up = [&] {
    for (const auto& s : streams) s->Cancel();
    return std::vector<std::shared_ptr<TokenRelay>>();
  };
  // Choice 0 first, alone: once its first token is out, its prompt's pages
  // are in the prefill node's prefix cache, where the others find them.
  for (int i = 0; i < request.n; ++i) {
    auto stream = StartDecode(a, i);
    if (!stream.ok()) {
      Fail(stream.status(), res, record.get());
      return give_up();
    }
    streams.push_back(*stream);
    if (i == 0 && !AwaitDecode(**stream, res, record.get(), client_gone)) {
      return give_up();
    }
  }
  for (int i = 1; i < request.n; ++i) {
    if (!AwaitDecode(*streams[i], res, record.get(), client_gone)) {
      return give_up();
    }
  }
  std::vector<std::shared_ptr<TokenRelay>> relays;
  for (int i = 0; i < request.n; ++i) {
    // The access record notes what choice 0's nodes reported; the others
    // note theirs apart (their completion tokens are added at the end).
    relays.push_back(std::make_shared<TokenRelay>(
        streams[i], tokenizer_,
        RelayOptions{request.stop, a.prompt, request.prompt, request.echo,
                     request.logprobs},
        i == 0 ? record : std::make_shared<AccessRecord>(*record)));
  }
  return relays;
}

void Router::Relay(std::shared_ptr<Admitted> a, http::Response& res,
                   std::shared_ptr<AccessRecord> record,
                   const std::function<bool()>& client_gone) {
  const CompletionRequest& request = a->request;
  const bool chat = request.chat;
  std::vector<std::shared_ptr<TokenRelay>> relays =
      OpenChoices(*a, res, record, client_gone);
  if (relays.empty()) return;  // answered (or abandoned) already

  std::vector<CompletionResult> results;
  for (int i = 0; i < request.n; ++i) {
    results.push_back(NewResult(*a));
    results.back().index = i;
    results.back().has_logprobs = request.logprobs >= 0;
  }
  if (!request.stream) {
    int completion_tokens = 0;
    for (int i = 0; i < request.n; ++i) {
      CompletionResult& result = results[i];
      std::string delta;
      while (relays[i]->Next(&result, &delta, &result.logprobs)) {
        result.text += delta;
      }
      if (!relays[i]->error().ok()) {
        for (const auto& r : relays) r->Cancel();
        return Fail(relays[i]->error(), res, record.get());
      }
      completion_tokens += result.completion_tokens;
    }
    metrics_.CountRequest(absl::OkStatus());
    res.set_content(CompletionResponseJson(results, chat), "application/json");
    record->status = 200;
    record->completion_tokens = completion_tokens;
    record->finish_reason = results[0].finish_reason;
    return Log(record.get());
  }
  RelayStream(std::move(a), std::move(relays), std::move(results), res,
              std::move(record));
}

// The streaming answer's state, kept by its provider: the choices' relays,
// each one's text so far, and which are still running.
struct Router::StreamState {
  std::shared_ptr<Admitted> admitted;
  std::vector<std::shared_ptr<TokenRelay>> relays;
  std::vector<CompletionResult> results;
  std::vector<bool> finished;
  int running = 0;
  size_t next = 0;      // the choice read next (round robin)
  bool logged = false;  // the record is logged once
  void CancelAll() {
    for (const auto& r : relays) r->Cancel();
  }
};

void Router::RelayStream(std::shared_ptr<Admitted> a,
                         std::vector<std::shared_ptr<TokenRelay>> relays,
                         std::vector<CompletionResult> results,
                         http::Response& res,
                         std::shared_ptr<AccessRecord> record) {
  auto state = std::make_shared<StreamState>();
  state->admitted = std::move(a);
  state->running = static_cast<int>(relays.size());
  state->finished.assign(relays.size(), false);
  state->relays = std::move(relays);
  state->results = std::move(results);
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, state, record](size_t, http::DataSink& sink) {
        return StreamNext(*state, *record, sink);
      },
      [this, state, record](bool) {
        state->CancelAll();
        if (state->logged) return;
        metrics_.CountRequest(absl::CancelledError("client disconnected"));
        record->status = 200;
        record->reason = "client_disconnected";
        Log(record.get());
      });
}

bool Router::StreamNext(StreamState& st, AccessRecord& record,
                        http::DataSink& sink) {
  const bool chat = st.admitted->request.chat;
  const size_t n = st.relays.size();
  while (st.finished[st.next]) st.next = (st.next + 1) % n;
  const size_t i = st.next;
  st.next = (i + 1) % n;
  CompletionResult& result = st.results[i];
  std::string delta;
  std::vector<LogprobEntry> logprobs;
  if (st.relays[i]->Next(&result, &delta, &logprobs)) {
    const std::string chunk =
        StreamChunkSse(result, delta, chat, /*final_chunk=*/false, logprobs);
    result.text += delta;
    if (!sink.write(chunk.data(), chunk.size())) {
      st.CancelAll();
      return false;
    }
    return true;
  }
  std::string tail;
  record.status = 200;  // sent with the first chunk
  const absl::Status& error = st.relays[i]->error();
  if (!error.ok()) {
    st.CancelAll();
    tail = "data: " + ErrorBody(ForClient(error)) + "\n\n" + StreamDoneSse();
    record.reason = ErrorReason(error);
    st.running = 0;
  } else {
    st.finished[i] = true;
    --st.running;
    // With one choice its final chunk carries the usage; with more, a last
    // event of its own does.
    tail = StreamChunkSse(result, "", chat, /*final_chunk=*/true, {},
                          /*usage=*/n == 1);
    if (st.running == 0) {
      if (n > 1) tail += StreamUsageSse(st.results, chat);
      tail += StreamDoneSse();
      record.finish_reason = st.results[0].finish_reason;
      record.completion_tokens = 0;
      for (const CompletionResult& r : st.results) {
        record.completion_tokens += r.completion_tokens;
      }
    }
  }
  sink.write(tail.data(), tail.size());
  if (st.running > 0) return true;
  metrics_.CountRequest(error);
  sink.done();
  st.logged = true;
  Log(&record);
  return true;
}

}  // namespace kvcanary::engine
