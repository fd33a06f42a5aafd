// kvcanary-engine: the engine's command line.
//
//   kvcanary-engine generate [--model M [--tokenizer T]] [--context N]
//                            --prompt P --max-tokens N [--temperature 0]
//                            [--echo]
//   kvcanary-engine demo [--model M --tokenizer T] [--threads N]
//   kvcanary-engine serve --role=router|prefill|decode [flags]
//   kvcanary-engine up --port P --tenants FILE [--model M --tokenizer T]
//   kvcanary-engine write-model (--shape 260k|15m --seed S | --from M)
//                               [--format llama2c|gguf --type f32|f16|q8_0
//                                --tokenizer T] --out FILE
//
// `kvcanary-engine <subcommand> --help` lists a subcommand's flags; a flag
// that is unknown, of another subcommand or badly valued exits 2.
//
// With no --model, the embedded default (a synthetic model of the stories260K
// shape, docs/model.md) and its tokenizer are used. --model takes a llama2.c
// checkpoint (with --tokenizer) or a GGUF file (its own tokenizer unless
// --tokenizer is given; docs/gguf.md).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/cli.h"
#include "common/status_macros.h"
#include "engine/app/demo.h"
#include "engine/app/incident_demo.h"
#include "engine/core/engine.h"
#include "engine/core/faults.h"
#include "engine/model/gguf_model.h"
#include "engine/model/model.h"
#include "engine/model/model_loader.h"
#include "engine/model/tokenizer.h"
#include "engine/nodes/serve.h"

ABSL_FLAG(std::string, model, "",
          "Model to load: a llama2.c checkpoint or a GGUF file (docs/gguf.md: "
          "llama architecture, F32, F16 and Q8_0 tensors); empty: the "
          "embedded default model (docs/model.md).");
ABSL_FLAG(std::string, tokenizer, "",
          "llama2.c tokenizer file: required with a llama2.c --model; with a "
          "GGUF one it replaces the file's own tokenizer. write-model: the "
          "tokenizer to embed in a GGUF file.");
ABSL_FLAG(int, context, 0,
          "Context length (positions) to run the model at; 0: the model's. A "
          "llama2.c checkpoint's is the length it was trained with, the "
          "upper bound; a GGUF file's llama.context_length may be below what "
          "the model was trained with, so any value up to 2^20 is taken, "
          "with a note above it.");
ABSL_FLAG(std::string, prompt, "", "Text to complete.");
ABSL_FLAG(int, max_tokens, 256, "Tokens to generate at most.");
ABSL_FLAG(double, temperature, 0.0, "Sampling temperature; 0 is greedy.");
ABSL_FLAG(double, top_p, 0.9,
          "Nucleus sampling threshold, used when --temperature > 0.");
ABSL_FLAG(uint64_t, seed, 0,
          "generate: the sampling seed (0: a fixed default); write-model: the "
          "weights' seed (0: the embedded default model's).");
ABSL_FLAG(bool, echo, false,
          "Print the prompt before the completion, as llama2.c's run does.");
ABSL_FLAG(int, threads, 1,
          "Threads for the kernels, the engine thread included (1 to 256).");
ABSL_FLAG(int, page_tokens, 16, "Token slots per KV page (1 to 4096).");
ABSL_FLAG(std::string, scrub, "none",
          "What a freed KV page gets before it is reused: none, zero or "
          "poison.");
ABSL_FLAG(std::string, prefix_cache, "tenant",
          "Reuse the cached KV pages of earlier prompts: tenant (keys salted "
          "by tenant: a tenant's own prompts only), global (one key space "
          "for all tenants: another tenant's identical prefix hits; a "
          "foreign_tenant_read, so use with --watermark=detect or off to see "
          "it served) or off. true and false mean tenant and off.");
ABSL_FLAG(std::string, watermark, "enforce",
          "Page stamp check on every KV read: off, detect (record a "
          "violation and serve) or enforce (record it and fail the "
          "request).");
ABSL_FLAG(std::string, shape, "260k",
          "Shape of the model to write: 260k (stories260K) or 15m (the "
          "stories15M shape).");
ABSL_FLAG(std::string, role, "", "The node to run: router, prefill or decode.");
ABSL_FLAG(std::string, host, "127.0.0.1", "Address to listen on.");
ABSL_FLAG(int, port, -1,
          "HTTP port to listen on (up: the router's); 0: any free port; -1: "
          "8000 for up, 0 for serve.");
ABSL_FLAG(int, kv_port, 0,
          "Decode role: port for incoming KV transfers (0: any free port).");
ABSL_FLAG(int, kv_listen_fd, -1,
          "Decode role: an inherited listening socket to take KV transfers "
          "on instead of binding --kv_port (set by up); -1: none.");
ABSL_FLAG(std::string, tenants, "",
          "Tenants JSON file (docs/api.md); required by up and the router "
          "role.");
ABSL_FLAG(std::vector<std::string>, prefill, {},
          "Router and decode roles: base URLs of the prefill nodes, "
          "comma-separated (the decode node calls them; no request names "
          "an address).");
ABSL_FLAG(std::vector<std::string>, decode_kv, {},
          "Prefill role: the decode nodes' KV ports it may send to, as "
          "NAME=HOST:PORT, comma-separated.");
ABSL_FLAG(std::string, name, "decode-0",
          "Decode role: this node's name in the prefill nodes' --decode-kv.");
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
ABSL_FLAG(bool, tls, false,
          "up: run the internal plane over mutual TLS, with a fresh CA and "
          "node certificate in up's private directory unless --tls-cert, "
          "--tls-key and --tls-ca name the deployment's own.");
ABSL_FLAG(int, metrics_port, -1,
          "serve, every role: serve /metrics (and /health) on this port of "
          "its own (0: any free port; the ready line names it), off the API "
          "listener; -1: on the node's HTTP port.");
ABSL_FLAG(int, max_trace_readers, 8,
          "Prefill and decode roles: concurrent GET /v1/trace readers; one "
          "more gets 503.");
ABSL_FLAG(std::vector<std::string>, decode, {},
          "Router role: base URLs of the decode nodes, comma-separated.");
ABSL_FLAG(int, max_prompt_tokens, 0,
          "Longest prompt a node accepts, in tokens (0: half the context on "
          "a prefill node, one less than the context on a decode node).");
ABSL_FLAG(int, max_waiting, 256,
          "Requests a node queues before it answers 429.");
ABSL_FLAG(int, num_pages, 0,
          "KV pages per node (0: enough for 64 full contexts).");
ABSL_FLAG(int, test_kv_receive_delay_ms, 0,
          "Tests only, decode role: pause each KV transfer this long after "
          "its metadata.");
ABSL_FLAG(int64_t, test_kv_receive_bytes_per_s, 0,
          "Tests only, decode role: receive each KV transfer at most this "
          "fast, a slow link (0: no limit).");
ABSL_FLAG(int, transfer_timeout_ms, 30000,
          "How long a request may wait on a node for pages, prefill and its "
          "KV transfer (at least 1).");
ABSL_FLAG(int, metadata_slots, 16,
          "Decode role: transfer metadata slots, which hand the first token "
          "and the staged K/V from the receiver to the request (1 to "
          "65536).");
ABSL_FLAG(int, max_in_flight, 256,
          "Router role: requests in flight before it answers 429.");
ABSL_FLAG(std::string, access_log, "",
          "Router role and up: append one JSON line per completion request "
          "to this file (docs/api.md); empty: none.");
ABSL_FLAG(std::string, up_status_file, "",
          "Router role: the status file of the `up` that started it "
          "(engine/supervisor_status.h), served in /health and /metrics; up "
          "sets it.");
ABSL_FLAG(int64_t, access_log_max_bytes, int64_t{64} << 20,
          "Rotate the access log before it grows past this many bytes.");
ABSL_FLAG(int, access_log_keep, 5,
          "Rotated access logs kept (FILE.1 newest ... FILE.N); 0: none.");
ABSL_FLAG(std::string, trace_file, "",
          "Prefill and decode roles: also append the trace stream to this "
          "file.");
ABSL_FLAG(uint32_t, trace_read_sample, 1,
          "Trace the KV page reads of every Nth request (0: none); "
          "violations are always traced.");
ABSL_FLAG(std::string, fault, "none",
          "Fault switches to turn on, comma-separated (kvcanary-engine "
          "faults lists them); none: all off.");
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
ABSL_FLAG(std::string, out, "", "File to write the checkpoint to.");
ABSL_FLAG(std::string, from, "",
          "write-model: convert this model file (llama2.c or GGUF) instead "
          "of generating one (--shape and --seed are then unused).");
ABSL_FLAG(std::string, format, "llama2c",
          "write-model: the file format, llama2c or gguf.");
ABSL_FLAG(std::string, type, "f32",
          "write-model --format gguf: the weights' type, f32, f16 or q8_0 "
          "(norms stay f32; q8_0 matrices whose rows are not whole blocks of "
          "32 are stored f16).");

namespace kvcanary::engine {
namespace {

// The flags a prefill or decode node reads; `up` passes them to both nodes.
std::vector<std::string> NodeFlagNames() {
  return {"model",
          "tokenizer",
          "context",
          "watermark",
          "scrub",
          "prefix_cache",
          "fault",
          "threads",
          "page_tokens",
          "num_pages",
          "max_waiting",
          "max_prompt_tokens",
          "transfer_timeout_ms",
          "metadata_slots",
          "trace_read_sample",
          "test_kv_receive_delay_ms",
          "test_kv_receive_bytes_per_s",
          "test_transfer_damage"};
}

std::vector<std::string> AccessLogFlagNames() {
  return {"access_log", "access_log_max_bytes", "access_log_keep"};
}

// The KV cache event stream's flags: serve --role=prefill and up.
std::vector<std::string> KvEventsFlagNames() {
  return {"kv_events", "kv_events_replay", "kv_events_topic",
          "kv_events_buffer", "test_kv_events_lose_every"};
}

// `up`'s own flags, then the nodes' and the access log's.
std::vector<std::string> UpFlagNames() {
  std::vector<std::string> up = {"host",
                                 "port",
                                 "tenants",
                                 "internal_secret_file",
                                 "trace_token_file",
                                 "max_trace_readers",
                                 "tls",
                                 "tls_cert",
                                 "tls_key",
                                 "tls_ca"};
  const std::vector<std::string> node = NodeFlagNames();
  const std::vector<std::string> access_log = AccessLogFlagNames();
  const std::vector<std::string> kv_events = KvEventsFlagNames();
  up.insert(up.end(), node.begin(), node.end());
  up.insert(up.end(), access_log.begin(), access_log.end());
  up.insert(up.end(), kv_events.begin(), kv_events.end());
  return up;
}

// `serve`'s own flags (every role's), then the access log's and the nodes'.
std::vector<std::string> ServeFlagNames() {
  std::vector<std::string> serve = {"role",
                                    "host",
                                    "port",
                                    "kv_port",
                                    "kv_listen_fd",
                                    "tenants",
                                    "prefill",
                                    "decode",
                                    "decode_kv",
                                    "name",
                                    "internal_secret_file",
                                    "trace_token_file",
                                    "max_trace_readers",
                                    "tls_cert",
                                    "tls_key",
                                    "tls_ca",
                                    "metrics_port",
                                    "max_in_flight",
                                    "trace_file",
                                    "up_status_file"};
  const std::vector<std::string> access_log = AccessLogFlagNames();
  const std::vector<std::string> node = NodeFlagNames();
  const std::vector<std::string> kv_events = KvEventsFlagNames();
  serve.insert(serve.end(), access_log.begin(), access_log.end());
  serve.insert(serve.end(), node.begin(), node.end());
  serve.insert(serve.end(), kv_events.begin(), kv_events.end());
  return serve;
}

// The subcommands and the flags each reads. None takes positional arguments.
CliSpec Cli() {
  CliSpec spec;
  spec.program = "kvcanary-engine";
  spec.summary =
      "An LLM inference engine whose KV pages carry stamps that catch one "
      "tenant's request reading another's (README.md).";
  spec.subcommands = {
      {"generate",
       "Generates one completion in this process and prints it.",
       {"model", "tokenizer", "context", "prompt", "max_tokens", "temperature",
        "top_p", "seed", "echo", "threads", "page_tokens", "scrub",
        "prefix_cache", "watermark", "fault"},
       {},
       {}},
      {"demo",
       "The whole story: a multi-tenant workload with a planted foreign write "
       "caught, then the incident reproduced across router, prefill and "
       "decode processes.",
       {"model", "tokenizer", "context", "threads"},
       {},
       {}},
      {"up",
       "Starts a router, a prefill node and a decode node as processes on "
       "this machine, prints their URLs, and serves until Ctrl-C.",
       UpFlagNames(),
       {},
       {}},
      {"serve",
       "Runs one node, --role=router, prefill or decode, in this process.",
       ServeFlagNames(),
       {},
       {}},
      {"faults", "Lists the fault switches --fault turns on.", {}, {}, {}},
      {"write-model",
       "Writes a deterministic synthetic model, or converts --from a model "
       "file, as a llama2.c checkpoint or a GGUF file (F32, F16 or Q8_0).",
       {"shape", "seed", "from", "format", "type", "tokenizer", "out"},
       {},
       {}},
  };
  return spec;
}

// The model and tokenizer the flags name; a note for the operator (a
// context above a GGUF file's) goes to stderr.
absl::StatusOr<LoadedModel> LoadModelFromFlags() {
  ModelLoadOptions options;
  options.model_path = absl::GetFlag(FLAGS_model);
  options.tokenizer_path = absl::GetFlag(FLAGS_tokenizer);
  options.context = absl::GetFlag(FLAGS_context);
  ASSIGN_OR_RETURN(LoadedModel loaded, LoadModelAndTokenizer(options));
  if (!loaded.note.empty()) {
    std::fprintf(stderr, "note: %s\n", loaded.note.c_str());
  }
  return loaded;
}

absl::Status Generate() {
  ASSIGN_OR_RETURN(LoadedModel loaded, LoadModelFromFlags());
  ASSIGN_OR_RETURN(WatermarkMode mode,
                   ParseWatermarkMode(absl::GetFlag(FLAGS_watermark)));
  EngineOptions options;
  options.num_threads = absl::GetFlag(FLAGS_threads);
  options.page_tokens = absl::GetFlag(FLAGS_page_tokens);
  options.watermark = mode;
  ASSIGN_OR_RETURN(options.scrub, ParseScrubPolicy(absl::GetFlag(FLAGS_scrub)));
  ASSIGN_OR_RETURN(options.faults, FaultSet::Parse(absl::GetFlag(FLAGS_fault)));
  ASSIGN_OR_RETURN(options.prefix_cache,
                   ParsePrefixCacheMode(absl::GetFlag(FLAGS_prefix_cache)));
  options.scheduler.max_batch_seqs = 1;
  if (options.num_threads < 1 || options.num_threads > 256) {
    return absl::InvalidArgumentError("--threads must be in [1, 256]");
  }
  if (options.page_tokens < 1 || options.page_tokens > 4096) {
    return absl::InvalidArgumentError("--page-tokens must be in [1, 4096]");
  }
  Engine engine(&loaded.model, options);
  std::vector<int> prompt = loaded.tokenizer.Encode(
      absl::GetFlag(FLAGS_prompt), /*bos=*/true, /*eos=*/false);
  SamplingParams sampling;
  sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  sampling.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  sampling.seed = absl::GetFlag(FLAGS_seed);
  sampling.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  ASSIGN_OR_RETURN(RequestId id, engine.Submit(TenantId(1), prompt, sampling));
  engine.RunUntilIdle();
  const Sequence& seq = *engine.Get(id);
  if (seq.state.finish_reason() == FinishReason::kAbort) {
    return seq.state.abort_status();
  }
  std::string text;
  if (absl::GetFlag(FLAGS_echo)) {
    std::vector<int> all(seq.prompt.begin() + 1, seq.prompt.end());
    all.insert(all.end(), seq.output.begin(), seq.output.end());
    text = loaded.tokenizer.DecodeAll(kBosToken, all);
  } else {
    text = loaded.tokenizer.DecodeAll(seq.prompt.back(), seq.output);
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  for (const auto& v : seq.violations) {
    std::fprintf(stderr, "watermark violation: %s\n", v.DebugString().c_str());
  }
  return absl::OkStatus();
}

absl::Status Demo() {
  ASSIGN_OR_RETURN(LoadedModel loaded, LoadModelFromFlags());
  DemoOptions options;
  options.num_threads = absl::GetFlag(FLAGS_threads);
  RETURN_IF_ERROR(RunDemo(loaded.model, loaded.tokenizer, options, stdout));
  std::vector<std::string> model_args;
  if (!absl::GetFlag(FLAGS_model).empty()) {
    model_args.push_back("--model=" + absl::GetFlag(FLAGS_model));
  }
  if (!absl::GetFlag(FLAGS_tokenizer).empty()) {
    model_args.push_back("--tokenizer=" + absl::GetFlag(FLAGS_tokenizer));
  }
  if (absl::GetFlag(FLAGS_context) != 0) {
    model_args.push_back(
        absl::StrCat("--context=", absl::GetFlag(FLAGS_context)));
  }
  return RunIncidentDemo(model_args, stdout);
}

absl::StatusOr<EngineOptions> NodeEngineOptions() {
  ASSIGN_OR_RETURN(WatermarkMode mode,
                   ParseWatermarkMode(absl::GetFlag(FLAGS_watermark)));
  EngineOptions e;
  e.watermark = mode;
  ASSIGN_OR_RETURN(e.scrub, ParseScrubPolicy(absl::GetFlag(FLAGS_scrub)));
  ASSIGN_OR_RETURN(e.faults, FaultSet::Parse(absl::GetFlag(FLAGS_fault)));
  ASSIGN_OR_RETURN(e.prefix_cache,
                   ParsePrefixCacheMode(absl::GetFlag(FLAGS_prefix_cache)));
  e.num_threads = absl::GetFlag(FLAGS_threads);
  e.page_tokens = absl::GetFlag(FLAGS_page_tokens);
  e.num_pages = absl::GetFlag(FLAGS_num_pages);
  if (e.num_threads < 1 || e.num_threads > 256) {
    return absl::InvalidArgumentError("--threads must be in [1, 256]");
  }
  if (e.page_tokens < 1 || e.page_tokens > 4096) {
    return absl::InvalidArgumentError("--page-tokens must be in [1, 4096]");
  }
  if (e.num_pages < 0)
    return absl::InvalidArgumentError("--num-pages must be >= 0");
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

absl::StatusOr<ServeOptions> ServeFlags(int default_port) {
  ServeOptions o;
  o.role = absl::GetFlag(FLAGS_role);
  o.host = absl::GetFlag(FLAGS_host);
  o.port =
      absl::GetFlag(FLAGS_port) >= 0 ? absl::GetFlag(FLAGS_port) : default_port;
  o.kv_port = absl::GetFlag(FLAGS_kv_port);
  o.kv_listen_fd = absl::GetFlag(FLAGS_kv_listen_fd);
  o.model_path = absl::GetFlag(FLAGS_model);
  o.tokenizer_path = absl::GetFlag(FLAGS_tokenizer);
  o.context = absl::GetFlag(FLAGS_context);
  o.tenants_path = absl::GetFlag(FLAGS_tenants);
  o.prefill_urls = absl::GetFlag(FLAGS_prefill);
  o.decode_urls = absl::GetFlag(FLAGS_decode);
  o.decode_kv = absl::GetFlag(FLAGS_decode_kv);
  o.node_name = absl::GetFlag(FLAGS_name);
  o.internal_secret_file = absl::GetFlag(FLAGS_internal_secret_file);
  o.trace_token_file = absl::GetFlag(FLAGS_trace_token_file);
  o.max_trace_readers = absl::GetFlag(FLAGS_max_trace_readers);
  o.tls = {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
           absl::GetFlag(FLAGS_tls_ca)};
  RETURN_IF_ERROR(tls::CheckFiles(o.tls));
  o.up_tls = absl::GetFlag(FLAGS_tls) || !o.tls.empty();
  o.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (o.metrics_port < -1 || o.metrics_port > 65535) {
    return absl::InvalidArgumentError("--metrics-port must be in [-1, 65535]");
  }
  if (o.max_trace_readers < 1 || o.max_trace_readers > 1024) {
    return absl::InvalidArgumentError(
        "--max-trace-readers must be in [1, 1024]");
  }
  o.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  o.max_waiting = absl::GetFlag(FLAGS_max_waiting);
  o.max_in_flight = absl::GetFlag(FLAGS_max_in_flight);
  ASSIGN_OR_RETURN(o.faults, FaultSet::Parse(absl::GetFlag(FLAGS_fault)));
  o.trace.read_sample_every = absl::GetFlag(FLAGS_trace_read_sample);
  o.trace.file = absl::GetFlag(FLAGS_trace_file);
  o.test_receive_delay =
      absl::Milliseconds(absl::GetFlag(FLAGS_test_kv_receive_delay_ms));
  o.test_receive_bytes_per_s = absl::GetFlag(FLAGS_test_kv_receive_bytes_per_s);
  o.transfer_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_transfer_timeout_ms));
  o.metadata_slots = absl::GetFlag(FLAGS_metadata_slots);
  o.access_log.path = absl::GetFlag(FLAGS_access_log);
  o.access_log.max_bytes = absl::GetFlag(FLAGS_access_log_max_bytes);
  o.access_log.keep = absl::GetFlag(FLAGS_access_log_keep);
  o.up_status_file = absl::GetFlag(FLAGS_up_status_file);
  if (o.access_log.max_bytes < 1 || o.access_log.keep < 0) {
    return absl::InvalidArgumentError(
        "--access-log-max-bytes must be >= 1 and --access-log-keep >= 0");
  }
  if (absl::GetFlag(FLAGS_transfer_timeout_ms) < 1 ||
      o.test_receive_bytes_per_s < 0) {
    return absl::InvalidArgumentError(
        "--transfer-timeout-ms must be >= 1 and "
        "--test-kv-receive-bytes-per-s >= 0");
  }
  if (o.metadata_slots < 1 || o.metadata_slots > 65536) {
    return absl::InvalidArgumentError("--metadata-slots must be in [1, 65536]");
  }
  if (o.max_waiting < 1 || o.max_in_flight < 1) {
    return absl::InvalidArgumentError(
        "--max-waiting and --max-in-flight must be >= 1");
  }
  ASSIGN_OR_RETURN(o.engine, NodeEngineOptions());
  const std::string damage = absl::GetFlag(FLAGS_test_transfer_damage);
  if (damage == "flip-byte") {
    o.damage = TransferDamage::kFlipPageByte;
  } else if (damage == "truncate") {
    o.damage = TransferDamage::kTruncateFrame;
  } else if (damage != "none") {
    return absl::InvalidArgumentError(
        "--test-transfer-damage: none, flip-byte or truncate");
  }
  if (o.port < 0 || o.port > 65535)
    return absl::InvalidArgumentError("--port out of range");
  RETURN_IF_ERROR(CheckModelFlags(o.model_path, o.tokenizer_path));
  RETURN_IF_ERROR(KvEventsFlags(&o));
  return o;
}

absl::Status Serve() {
  ASSIGN_OR_RETURN(ServeOptions o, ServeFlags(0));
  return RunServe(o);
}

absl::Status Up() {
  ASSIGN_OR_RETURN(ServeOptions o, ServeFlags(8000));
  if (o.tenants_path.empty())
    return absl::InvalidArgumentError("up needs --tenants");
  // Node flags go to both nodes as given.
  std::vector<std::string> node_args = {
      absl::StrCat("--watermark=", absl::GetFlag(FLAGS_watermark)),
      absl::StrCat("--scrub=", absl::GetFlag(FLAGS_scrub)),
      absl::StrCat("--prefix_cache=",
                   PrefixCacheModeName(o.engine.prefix_cache)),
      absl::StrCat("--fault=", absl::GetFlag(FLAGS_fault)),
      absl::StrCat("--trace_read_sample=",
                   absl::GetFlag(FLAGS_trace_read_sample)),
      absl::StrCat("--threads=", absl::GetFlag(FLAGS_threads)),
      absl::StrCat("--page_tokens=", absl::GetFlag(FLAGS_page_tokens)),
      absl::StrCat("--num_pages=", absl::GetFlag(FLAGS_num_pages)),
      absl::StrCat("--max_waiting=", absl::GetFlag(FLAGS_max_waiting)),
      absl::StrCat("--max_prompt_tokens=",
                   absl::GetFlag(FLAGS_max_prompt_tokens)),
      absl::StrCat("--test_kv_receive_delay_ms=",
                   absl::GetFlag(FLAGS_test_kv_receive_delay_ms)),
      absl::StrCat("--test_kv_receive_bytes_per_s=",
                   absl::GetFlag(FLAGS_test_kv_receive_bytes_per_s)),
      absl::StrCat("--transfer_timeout_ms=",
                   absl::GetFlag(FLAGS_transfer_timeout_ms)),
      absl::StrCat("--metadata_slots=", absl::GetFlag(FLAGS_metadata_slots)),
      absl::StrCat("--test_transfer_damage=",
                   absl::GetFlag(FLAGS_test_transfer_damage))};
  return RunUp(o, node_args);
}

// The model write-model writes: --from a file, else the synthetic --shape
// and --seed (with the default tokenizer, which a GGUF file carries).
absl::StatusOr<ModelFile> WriteModelSource() {
  const std::string from = absl::GetFlag(FLAGS_from);
  if (!from.empty()) return LoadModelFile(from, 0);
  const std::string shape = absl::GetFlag(FLAGS_shape);
  ModelConfig config;
  if (shape == "260k") {
    config = Stories260KConfig();
  } else if (shape == "15m") {
    config = Stories15MShapeConfig();
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown --shape '", shape, "' (want 260k or 15m)"));
  }
  const uint64_t seed = absl::GetFlag(FLAGS_seed) != 0
                            ? absl::GetFlag(FLAGS_seed)
                            : kDefaultModelSeed;
  Model model = SyntheticModel(config, seed);
  Tokenizer tokenizer = Tokenizer::Default(config.vocab_size);
  return ModelFile{std::move(model), std::move(tokenizer), ""};
}

absl::Status WriteModel() {
  const std::string out = absl::GetFlag(FLAGS_out);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (out.empty()) return absl::InvalidArgumentError("write-model needs --out");
  if (format != "llama2c" && format != "gguf") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown --format '", format, "' (want llama2c or gguf)"));
  }
  ASSIGN_OR_RETURN(const GgufWeightType type,
                   ParseGgufWeightType(absl::GetFlag(FLAGS_type)));
  ASSIGN_OR_RETURN(ModelFile source, WriteModelSource());
  if (format == "llama2c") {
    if (type != GgufWeightType::kF32 || !absl::GetFlag(FLAGS_tokenizer).empty())
      return absl::InvalidArgumentError(
          "--type and --tokenizer are for --format gguf (a llama2.c "
          "checkpoint is f32 and has no tokenizer)");
    return WriteLlama2cModel(source.model, out);
  }
  if (!absl::GetFlag(FLAGS_tokenizer).empty()) {
    ASSIGN_OR_RETURN(source.tokenizer,
                     Tokenizer::Load(absl::GetFlag(FLAGS_tokenizer),
                                     source.model.config.vocab_size));
  }
  if (!source.tokenizer.has_value()) {
    std::fprintf(stderr,
                 "note: %s has no tokenizer (pass --tokenizer to embed one); "
                 "loading it needs --tokenizer\n",
                 out.c_str());
  }
  return WriteGgufModel(
      source.model, source.tokenizer ? &*source.tokenizer : nullptr, type, out);
}

}  // namespace
}  // namespace kvcanary::engine

int main(int argc, char** argv) {
  const kvcanary::CliSpec spec = kvcanary::engine::Cli();
  if (argc < 2) {
    std::fputs(kvcanary::CliHelp(spec, "").c_str(), stderr);
    return 2;
  }
  absl::StatusOr<kvcanary::CliParse> cli = kvcanary::ParseCli(spec, argc, argv);
  if (!cli.ok()) {
    std::fprintf(stderr, "kvcanary-engine: %s\n",
                 std::string(cli.status().message()).c_str());
    return 2;
  }
  if (cli->help) {
    std::fputs(kvcanary::CliHelp(spec, cli->subcommand).c_str(), stdout);
    return 0;
  }
  const std::string& command = cli->subcommand;
  absl::Status status;
  if (command == "generate") {
    status = kvcanary::engine::Generate();
  } else if (command == "serve") {
    status = kvcanary::engine::Serve();
  } else if (command == "up") {
    status = kvcanary::engine::Up();
  } else if (command == "faults") {
    for (const auto& f : kvcanary::engine::AllFaults()) {
      std::printf("%-24s %s\n", f.name, f.description);
    }
  } else if (command == "demo") {
    status = kvcanary::engine::Demo();
  } else if (command == "write-model") {
    status = kvcanary::engine::WriteModel();
  }
  if (!status.ok()) {
    std::fprintf(stderr, "kvcanary-engine %s: %s\n", command.c_str(),
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}
