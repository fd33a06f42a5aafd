#include "engine/app/cli/node_flags.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "engine/app/cli/shared_flags.h"
#include "engine/core/faults.h"
#include "engine/model/gguf_model.h"

ABSL_FLAG(std::string, host, "127.0.0.1", "Address to listen on.");
ABSL_FLAG(int, port, -1,
          "HTTP port to listen on (up: the router's); 0: any free port; -1: "
          "8000 for up, 0 for serve.");
ABSL_FLAG(std::string, tenants, "",
          "Tenants JSON file (docs/api.md); required by up and the router "
          "role.");
ABSL_FLAG(std::string, internal_secret_file, "",
          "The deployment's internal secret (one line, >= 32 characters, "
          "mode 0600): required by serve; up generates one when empty.");
ABSL_FLAG(std::string, trace_token_file, "",
          "Prefill and decode roles: the admin token GET /v1/trace requires "
          "(same file rules); none: the trace stream is off. up generates "
          "one when empty and prints its path.");
ABSL_FLAG(std::string, tls_cert, "",
          "Mutual TLS between nodes (docs/nodes.md): this node's certificate "
          "(PEM), signed by the deployment CA. With --tls-key and --tls-ca "
          "the nodes' listeners and the KV port require the CA's client "
          "certificates and node URLs are https://.");
ABSL_FLAG(std::string, tls_key, "",
          "Mutual TLS: the private key of --tls-cert (PEM).");
ABSL_FLAG(std::string, tls_ca, "",
          "Mutual TLS: the deployment CA's certificate (PEM); the only one "
          "trusted.");
ABSL_FLAG(int, max_trace_readers, 8,
          "Prefill and decode roles: concurrent GET /v1/trace readers; one "
          "more gets 503.");
ABSL_FLAG(int, max_prompt_tokens, 0,
          "Longest prompt a node accepts, in tokens (0: half the context on "
          "a prefill node, one less than the context on a decode node).");
ABSL_FLAG(int, max_waiting, 256,
          "Requests a node queues before it answers 429.");
ABSL_FLAG(int, num_pages, 0,
          "KV pages per node (0: enough for 64 full contexts).");
ABSL_FLAG(std::string, free_list, "lifo",
          "Which free KV page a node hands out next: lifo (the most recently "
          "freed) or fifo (the least recently freed).");
ABSL_FLAG(int, test_kv_receive_delay_ms, 0,
          "Tests only, decode role: pause each KV transfer this long after "
          "its metadata.");
ABSL_FLAG(int64_t, test_kv_receive_bytes_per_s, 0,
          "Tests only, decode role: receive each KV transfer at most this "
          "fast, a slow link (0: no limit).");
ABSL_FLAG(int, transfer_timeout_ms, 30000,
          "How long a request may wait on a node for pages, prefill and its "
          "KV transfer (at least 1).");
ABSL_FLAG(int, node_pool_idle, 32,
          "Router role: idle keep-alive connections it keeps to each decode "
          "node for the next requests (0 to 1024; 0: a new connection for "
          "every request).");
ABSL_FLAG(std::string, served_model_name, "",
          "Router role and up: the model's name in /v1/models, the one a "
          "request's \"model\" may name (or omit); empty: the --model "
          "file's name without directory and extension, kvcanary-synthetic "
          "for the embedded model.");
ABSL_FLAG(std::string, tenant_header, "",
          "Router role: the HTTP header naming the tenant a gateway's request "
          "is for; applies to keys of tenants marked \"gateway\": true in "
          "the tenants file (docs/api.md, \"Gateways\"). Empty: none.");
ABSL_FLAG(std::string, chat_template, "plain",
          "Router role and up: how /v1/chat/completions messages become the "
          "prompt: plain (their contents joined by newlines) or kvcanary (a "
          "header of at least 16 tokens and role markers, as real chat "
          "templates; docs/api.md, \"Chat templates\").");
ABSL_FLAG(int, metadata_slots, 16,
          "Decode role: transfer metadata slots, which hand the first token "
          "and the staged K/V from the receiver to the request (1 to "
          "65536).");
ABSL_FLAG(std::string, access_log, "",
          "Router role and up: append one JSON line per completion request "
          "to this file (docs/api.md); empty: none.");
ABSL_FLAG(int64_t, access_log_max_bytes, int64_t{64} << 20,
          "Rotate the access log before it grows past this many bytes.");
ABSL_FLAG(int, access_log_keep, 5,
          "Rotated access logs kept (FILE.1 newest ... FILE.N); 0: none.");
ABSL_FLAG(uint32_t, trace_read_sample, 1,
          "Trace the KV page reads of every Nth request (0: none); "
          "violations are always traced.");
ABSL_FLAG(std::string, test_transfer_damage, "none",
          "Tests only, prefill role: damage the first KV page frame sent: "
          "none, flip-byte or truncate.");
ABSL_FLAG(std::string, kv_events, "",
          "Prefill role and up: publish the prefix cache's KV block events "
          "as vLLM does (docs/nodes.md, \"KV cache events\") on a ZMQ PUB "
          "socket bound at tcp://HOST:PORT (0: any free port; the ready line "
          "names it); subscribers log in with ZMQ PLAIN, user kvcanary, the "
          "trace token as password. Needs the prefix cache; empty: off.");
ABSL_FLAG(std::string, kv_events_replay, "",
          "With --kv-events: the replay socket (ZMQ ROUTER), tcp://HOST:PORT; "
          "empty: --kv-events' host, any free port; off: none.");
ABSL_FLAG(std::string, kv_events_topic, "",
          "With --kv-events: the topic frame of every message.");
ABSL_FLAG(int, kv_events_buffer, 10000,
          "With --kv-events: event batches kept for replay (1 to 1000000).");
ABSL_FLAG(int, test_kv_events_lose_every, 0,
          "Tests only: every Nth event batch takes its sequence number but "
          "is neither sent nor kept for replay (a PUB past its high-water "
          "mark whose buffer moved on); 0: none.");

ABSL_FLAG(int, http_max_unoccupied_per_address, 32,
          "Every role's HTTP listener: at its connection cap, room is made "
          "from the address with the most unoccupied (pending or idle) "
          "connections over this share; one address keeps at most this many "
          "unoccupied once the cap is reached.");
ABSL_FLAG(int, kv_max_unauthenticated, 64,
          "Decode node's KV port: unauthenticated connections at once from "
          "addresses other than the prefill nodes'.");
ABSL_FLAG(int, kv_max_unauthenticated_per_peer, 4,
          "Decode node's KV port: unauthenticated connections at once from "
          "one such address.");
ABSL_FLAG(int, kv_reserved_unauthenticated, 32,
          "Decode node's KV port: unauthenticated connections at once kept "
          "for the prefill nodes' addresses (beyond, they use the general "
          "pool).");
ABSL_FLAG(int, kv_max_idle_sessions, 64,
          "Decode node's KV port: authenticated sessions waiting for their "
          "next transfer, at once; one past the cap is closed after its Ack.");
ABSL_FLAG(int, kv_send_attempts, 5,
          "Prefill node: tries of a KV transfer the decode node's KV port "
          "refused before it claimed anything (at capacity, or its pre-auth "
          "deadline missed under load), with 10 ms doubling backoff.");

namespace kvcanary::engine::cli {
namespace {

// What operators tune: the listeners' per-address share, the KV port's
// caps, the KV sender's tries (docs/nodes.md, "Tuning"), into `o`.
absl::Status TuningFlags(ServeOptions* o) {
  o->http_max_unoccupied_per_address =
      absl::GetFlag(FLAGS_http_max_unoccupied_per_address);
  KvAdmissionOptions& kv = o->kv_admission;
  kv.max_unauthenticated = absl::GetFlag(FLAGS_kv_max_unauthenticated);
  kv.max_unauthenticated_per_peer =
      absl::GetFlag(FLAGS_kv_max_unauthenticated_per_peer);
  kv.reserved_unauthenticated =
      absl::GetFlag(FLAGS_kv_reserved_unauthenticated);
  kv.max_idle_sessions = absl::GetFlag(FLAGS_kv_max_idle_sessions);
  o->kv_send_attempts = absl::GetFlag(FLAGS_kv_send_attempts);
  if (o->http_max_unoccupied_per_address < 1 ||
      o->http_max_unoccupied_per_address > 65536) {
    return absl::InvalidArgumentError(
        "--http-max-unoccupied-per-address must be in [1, 65536]");
  }
  for (const auto& [name, value] :
       {std::pair<const char*, int>{"kv-max-unauthenticated",
                                    kv.max_unauthenticated},
        {"kv-max-unauthenticated-per-peer", kv.max_unauthenticated_per_peer},
        {"kv-reserved-unauthenticated", kv.reserved_unauthenticated},
        {"kv-max-idle-sessions", kv.max_idle_sessions}}) {
    if (value < 0 || value > 65536) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " must be in [0, 65536]"));
    }
  }
  if (o->kv_send_attempts < 1 || o->kv_send_attempts > 20) {
    return absl::InvalidArgumentError("--kv-send-attempts must be in [1, 20]");
  }
  return absl::OkStatus();
}

// An RFC 9110 token (a header name): tchar = ALPHA / DIGIT / one of
// !#$%&'*+-.^_`|~.
bool IsHttpToken(absl::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) &&
        !absl::StrContains("!#$%&'*+-.^_`|~", c)) {
      return false;
    }
  }
  return true;
}

// The engine options of a node: EngineOptionsFromFlags and --num-pages.
absl::StatusOr<EngineOptions> NodeEngineOptions() {
  ASSIGN_OR_RETURN(EngineOptions e, EngineOptionsFromFlags());
  e.num_pages = absl::GetFlag(FLAGS_num_pages);
  if (e.num_pages < 0)
    return absl::InvalidArgumentError("--num-pages must be >= 0");
  ASSIGN_OR_RETURN(e.free_list,
                   ParseFreeListOrder(absl::GetFlag(FLAGS_free_list)));
  return e;
}

// What the nodes' model flags must hold before any process starts: a
// tokenizer only with a model, and one for a llama2.c checkpoint.
absl::Status CheckModelFlags(const std::string& model,
                             const std::string& tokenizer) {
  if (model.empty() && !tokenizer.empty()) {
    return absl::InvalidArgumentError("--tokenizer given without --model");
  }
  if (!model.empty() && tokenizer.empty() && !IsGgufPath(model)) {
    return absl::InvalidArgumentError(
        "--model needs --tokenizer (a GGUF file carries its own)");
  }
  return absl::OkStatus();
}

// The KV event stream's flags into `o`, checked before any process starts.
// REQUIRES: o->engine is read.
absl::Status KvEventsFlags(ServeOptions* o) {
  o->kv_events = absl::GetFlag(FLAGS_kv_events);
  o->kv_events_replay = absl::GetFlag(FLAGS_kv_events_replay);
  o->kv_events_topic = absl::GetFlag(FLAGS_kv_events_topic);
  o->kv_events_buffer = absl::GetFlag(FLAGS_kv_events_buffer);
  o->test_kv_events_lose_every = absl::GetFlag(FLAGS_test_kv_events_lose_every);
  if (o->kv_events.empty()) return absl::OkStatus();
  return KvEventsOptionsFor(*o).status();
}

// Where to listen, the model, the tenants and secrets, and TLS into `o`.
absl::Status EndpointFlags(int default_port, ServeOptions* o) {
  o->host = absl::GetFlag(FLAGS_host);
  o->port =
      absl::GetFlag(FLAGS_port) >= 0 ? absl::GetFlag(FLAGS_port) : default_port;
  o->model_path = absl::GetFlag(FLAGS_model);
  o->tokenizer_path = absl::GetFlag(FLAGS_tokenizer);
  o->context = absl::GetFlag(FLAGS_context);
  o->tenants_path = absl::GetFlag(FLAGS_tenants);
  o->served_model_name = absl::GetFlag(FLAGS_served_model_name);
  for (char c : o->served_model_name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          "--served-model-name must not hold control characters");
    }
  }
  o->internal_secret_file = absl::GetFlag(FLAGS_internal_secret_file);
  o->trace_token_file = absl::GetFlag(FLAGS_trace_token_file);
  o->max_trace_readers = absl::GetFlag(FLAGS_max_trace_readers);
  o->tls = {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
            absl::GetFlag(FLAGS_tls_ca)};
  RETURN_IF_ERROR(tls::CheckFiles(o->tls));
  if (o->max_trace_readers < 1 || o->max_trace_readers > 1024) {
    return absl::InvalidArgumentError(
        "--max-trace-readers must be in [1, 1024]");
  }
  return absl::OkStatus();
}

// The test-only transfer damage --test-transfer-damage names.
absl::StatusOr<TransferDamage> TransferDamageFromFlags() {
  const std::string damage = absl::GetFlag(FLAGS_test_transfer_damage);
  if (damage == "flip-byte") return TransferDamage::kFlipPageByte;
  if (damage == "truncate") return TransferDamage::kTruncateFrame;
  if (damage != "none") {
    return absl::InvalidArgumentError(
        "--test-transfer-damage: none, flip-byte or truncate");
  }
  return TransferDamage::kNone;
}

// The limits of requests and transfers, and the access log, into `o`.
absl::Status LimitFlags(ServeOptions* o) {
  o->max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  o->max_waiting = absl::GetFlag(FLAGS_max_waiting);
  ASSIGN_OR_RETURN(o->faults, FaultSet::Parse(absl::GetFlag(FLAGS_fault)));
  o->trace.read_sample_every = absl::GetFlag(FLAGS_trace_read_sample);
  o->test_receive_delay =
      absl::Milliseconds(absl::GetFlag(FLAGS_test_kv_receive_delay_ms));
  o->test_receive_bytes_per_s =
      absl::GetFlag(FLAGS_test_kv_receive_bytes_per_s);
  o->transfer_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_transfer_timeout_ms));
  o->metadata_slots = absl::GetFlag(FLAGS_metadata_slots);
  o->node_pool_idle = absl::GetFlag(FLAGS_node_pool_idle);
  if (o->node_pool_idle < 0 || o->node_pool_idle > 1024) {
    return absl::InvalidArgumentError("--node-pool-idle must be in [0, 1024]");
  }
  o->tenant_header = absl::GetFlag(FLAGS_tenant_header);
  if (!o->tenant_header.empty() && !IsHttpToken(o->tenant_header)) {
    return absl::InvalidArgumentError(
        "--tenant-header must be an HTTP header name (RFC 9110 token)");
  }
  ASSIGN_OR_RETURN(o->chat_template,
                   ParseChatTemplate(absl::GetFlag(FLAGS_chat_template)));
  o->access_log.path = absl::GetFlag(FLAGS_access_log);
  o->access_log.max_bytes = absl::GetFlag(FLAGS_access_log_max_bytes);
  o->access_log.keep = absl::GetFlag(FLAGS_access_log_keep);
  if (o->access_log.max_bytes < 1 || o->access_log.keep < 0) {
    return absl::InvalidArgumentError(
        "--access-log-max-bytes must be >= 1 and --access-log-keep >= 0");
  }
  if (absl::GetFlag(FLAGS_transfer_timeout_ms) < 1 ||
      o->test_receive_bytes_per_s < 0) {
    return absl::InvalidArgumentError(
        "--transfer-timeout-ms must be >= 1 and "
        "--test-kv-receive-bytes-per-s >= 0");
  }
  if (o->metadata_slots < 1 || o->metadata_slots > 65536) {
    return absl::InvalidArgumentError("--metadata-slots must be in [1, 65536]");
  }
  if (o->max_waiting < 1 || o->max_in_flight < 1) {
    return absl::InvalidArgumentError(
        "--max-waiting and --max-in-flight must be >= 1");
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> NodeFlagNames() {
  return {"model",
          "tokenizer",
          "context",
          "watermark",
          "scrub",
          "prefix_cache",
          "cache_salt",
          "host_tier_pages",
          "fault",
          "sample_wrong_row_steps",
          "numerics",
          "threads",
          "page_tokens",
          "num_pages",
          "free_list",
          "max_waiting",
          "max_prompt_tokens",
          "transfer_timeout_ms",
          "metadata_slots",
          "node_pool_idle",
          "tenant_header",
          "chat_template",
          "served_model_name",
          "trace_read_sample",
          "http_max_unoccupied_per_address",
          "kv_max_unauthenticated",
          "kv_max_unauthenticated_per_peer",
          "kv_reserved_unauthenticated",
          "kv_max_idle_sessions",
          "kv_send_attempts",
          "test_kv_receive_delay_ms",
          "test_kv_receive_bytes_per_s",
          "test_transfer_damage"};
}

std::vector<std::string> AccessLogFlagNames() {
  return {"access_log", "access_log_max_bytes", "access_log_keep"};
}

std::vector<std::string> KvEventsFlagNames() {
  return {"kv_events", "kv_events_replay", "kv_events_topic",
          "kv_events_buffer", "test_kv_events_lose_every"};
}

absl::Status NodeOptionsFromFlags(int default_port, ServeOptions* o) {
  RETURN_IF_ERROR(EndpointFlags(default_port, o));
  RETURN_IF_ERROR(LimitFlags(o));
  RETURN_IF_ERROR(TuningFlags(o));
  ASSIGN_OR_RETURN(o->engine, NodeEngineOptions());
  ASSIGN_OR_RETURN(o->damage, TransferDamageFromFlags());
  if (o->port < 0 || o->port > 65535)
    return absl::InvalidArgumentError("--port out of range");
  RETURN_IF_ERROR(CheckModelFlags(o->model_path, o->tokenizer_path));
  return KvEventsFlags(o);
}

}  // namespace kvcanary::engine::cli
