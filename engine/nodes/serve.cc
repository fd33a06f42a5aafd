#include "engine/nodes/serve.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/temp_dir.h"
#include "engine/model/model.h"
#include "engine/model/model_loader.h"
#include "engine/model/tokenizer.h"
#include "engine/nodes/decode_node.h"
#include "engine/nodes/router.h"
#include "engine/nodes/supervisor.h"
#include "engine/nodes/tenants.h"
#include "engine/transfer/kv_connection.h"

namespace kvcanary::engine {
namespace {

// The node's model and tokenizer; a note for the operator goes to stderr.
absl::StatusOr<LoadedModel> LoadModel(const ServeOptions& o) {
  ModelLoadOptions options;
  options.model_path = o.model_path;
  options.tokenizer_path = o.tokenizer_path;
  options.context = o.context;
  ASSIGN_OR_RETURN(LoadedModel loaded, LoadModelAndTokenizer(options));
  if (!loaded.note.empty()) {
    std::fprintf(stderr, "note: %s\n", loaded.note.c_str());
  }
  return loaded;
}

// Blocks SIGINT/SIGTERM in this thread (and the threads it starts), so
// WaitForStopSignal() can take them synchronously.
sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

void PrintReady(const std::string& line) {
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

// Prints the ready line, serves until SIGINT/SIGTERM, then stops the node.
template <typename Node>
absl::Status ServeUntilSignal(Node& node, const std::string& ready_line,
                              const sigset_t& stop) {
  PrintReady(ready_line);
  int sig;
  sigwait(&stop, &sig);
  node.Stop();
  return absl::OkStatus();
}

// The credentials a node's listeners require, from the files the options
// name: the internal secret is mandatory, the trace token optional.
absl::StatusOr<NodeCredentials> LoadCredentials(const ServeOptions& o) {
  NodeCredentials c;
  if (o.internal_secret_file.empty()) {
    return absl::InvalidArgumentError(
        "serve needs --internal-secret-file (up generates one)");
  }
  ASSIGN_OR_RETURN(c.internal, SharedSecret::FromFile(o.internal_secret_file));
  if (!o.trace_token_file.empty()) {
    ASSIGN_OR_RETURN(c.trace, SharedSecret::FromFile(o.trace_token_file));
  }
  c.max_trace_readers = o.max_trace_readers;
  if (!o.tls.empty()) {
    ASSIGN_OR_RETURN(c.tls, tls::Context::Load(o.tls));
  }
  return c;
}

// What both node roles take from the serve options alike.
template <typename NodeOptions>
void SetNodeOptions(const ServeOptions& o, const NodeCredentials& creds,
                    NodeOptions* n) {
  n->creds = creds;
  n->metrics_port = o.metrics_port;
  n->host = o.host;
  n->http_port = o.port;
  n->max_prompt_tokens = o.max_prompt_tokens;
  n->max_waiting = o.max_waiting;
  n->engine = o.engine;
  n->faults = o.faults;
  n->trace = o.trace;
  n->transfer_timeout = o.transfer_timeout;
  n->http_max_unoccupied_per_address = o.http_max_unoccupied_per_address;
}

// " metrics=PORT" for a ready line, when the metrics have their own port.
std::string MetricsField(int port) {
  return port < 0 ? "" : absl::StrCat(" metrics=", port);
}

// " kv_events=... [kv_events_replay=...]" for a prefill node's ready line.
std::string KvEventsFields(const PrefillNode& node) {
  std::string out;
  if (node.kv_events_endpoint().empty()) return out;
  absl::StrAppend(&out, " kv_events=", node.kv_events_endpoint());
  if (!node.kv_events_replay_endpoint().empty()) {
    absl::StrAppend(&out,
                    " kv_events_replay=", node.kv_events_replay_endpoint());
  }
  return out;
}

// The kv_events flags as `up` hands them to the prefill node.
std::vector<std::string> KvEventsArgs(const ServeOptions& o) {
  if (o.kv_events.empty()) return {};
  return {"--kv_events=" + o.kv_events,
          "--kv_events_replay=" + o.kv_events_replay,
          "--kv_events_topic=" + o.kv_events_topic,
          absl::StrCat("--kv_events_buffer=", o.kv_events_buffer),
          absl::StrCat("--test_kv_events_lose_every=",
                       o.test_kv_events_lose_every)};
}

}  // namespace

absl::StatusOr<KvEventPublisherOptions> KvEventsOptionsFor(
    const ServeOptions& o) {
  if (o.engine.prefix_cache == PrefixCacheMode::kOff) {
    return absl::InvalidArgumentError(
        "--kv-events publishes the prefix cache's block events: it needs "
        "--prefix-cache=tenant or global");
  }
  if (o.kv_events_buffer < 1 || o.kv_events_buffer > 1000000) {
    return absl::InvalidArgumentError(
        "--kv-events-buffer must be in [1, 1000000]");
  }
  KvEventPublisherOptions k;
  ASSIGN_OR_RETURN(const TcpEndpoint pub, ParseTcpEndpoint(o.kv_events));
  k.endpoint = o.kv_events;
  if (o.kv_events_replay.empty()) {
    k.replay_endpoint = absl::StrCat("tcp://", pub.host, ":0");
  } else if (o.kv_events_replay != "off") {
    RETURN_IF_ERROR(ParseTcpEndpoint(o.kv_events_replay).status());
    k.replay_endpoint = o.kv_events_replay;
  }
  k.topic = o.kv_events_topic;
  k.buffer_batches = o.kv_events_buffer;
  k.test_lose_every = std::max(0, o.test_kv_events_lose_every);
  return k;
}

namespace {

// The router's options from serve's.
RouterOptions RouterOptionsFor(const ServeOptions& o,
                               const NodeCredentials& creds) {
  RouterOptions r;
  r.internal_secret = creds.internal;
  r.admin_token = creds.trace;
  r.tls = creds.tls;
  r.metrics_port = o.metrics_port;
  r.host = o.host;
  r.http_port = o.port;
  r.prefill_urls = o.prefill_urls;
  r.decode_urls = o.decode_urls;
  r.max_in_flight = o.max_in_flight;
  r.http_max_unoccupied_per_address = o.http_max_unoccupied_per_address;
  r.node_pool_idle = o.node_pool_idle;
  r.tenant_header = o.tenant_header;
  r.chat_template = o.chat_template;
  r.model_name = o.served_model_name.empty()
                     ? DefaultServedModelName(o.model_path)
                     : o.served_model_name;
  r.faults = o.faults;
  r.access_log = o.access_log;
  r.up_status_file = o.up_status_file;
  return r;
}

}  // namespace

absl::Status RunServe(const ServeOptions& o) {
  sigset_t stop = BlockStopSignals();
  ASSIGN_OR_RETURN(LoadedModel loaded, LoadModel(o));
  const Model& model = loaded.model;
  ASSIGN_OR_RETURN(NodeCredentials creds, LoadCredentials(o));
  if (!o.kv_events.empty() && o.role != "prefill") {
    return absl::InvalidArgumentError(
        "--kv-events is for the prefill role (its prefix cache)");
  }
  if (o.role == "prefill") {
    PrefillNodeOptions p;
    SetNodeOptions(o, creds, &p);
    for (const std::string& spec : o.decode_kv) {
      ASSIGN_OR_RETURN(KvPeer peer, ParseKvPeer(spec));
      p.kv_peers.push_back(peer);
    }
    p.damage = o.damage;
    p.kv_send_attempts = o.kv_send_attempts;
    if (!o.kv_events.empty()) {
      ASSIGN_OR_RETURN(p.kv_events, KvEventsOptionsFor(o));
    }
    PrefillNode node(&model, p);
    RETURN_IF_ERROR(node.Start());
    return ServeUntilSignal(
        node,
        absl::StrCat("ready role=prefill http=", node.http_port(),
                     MetricsField(node.metrics_port()), KvEventsFields(node)),
        stop);
  }
  if (o.role == "decode") {
    DecodeNodeOptions d;
    SetNodeOptions(o, creds, &d);
    d.name = o.node_name;
    d.prefill_urls = o.prefill_urls;
    d.kv_port = o.kv_port;
    d.kv_listen_fd = o.kv_listen_fd;
    d.test_receive_delay = o.test_receive_delay;
    d.test_receive_bytes_per_s = o.test_receive_bytes_per_s;
    d.metadata_slots = o.metadata_slots;
    d.kv_admission = o.kv_admission;
    DecodeNode node(&model, d);
    RETURN_IF_ERROR(node.Start());
    return ServeUntilSignal(
        node,
        absl::StrCat("ready role=decode http=", node.http_port(),
                     " kv=", node.kv_port(), MetricsField(node.metrics_port())),
        stop);
  }
  if (o.role == "router") {
    const Tokenizer& tokenizer = loaded.tokenizer;
    if (o.tenants_path.empty())
      return absl::InvalidArgumentError("the router needs --tenants");
    ASSIGN_OR_RETURN(TenantRegistry tenants,
                     TenantRegistry::LoadFile(o.tenants_path));
    Router router(&tokenizer, &tenants, RouterOptionsFor(o, creds));
    RETURN_IF_ERROR(router.Start());
    return ServeUntilSignal(
        router,
        absl::StrCat("ready role=router http=", router.http_port(),
                     MetricsField(router.metrics_port())),
        stop);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown --role '", o.role, "' (want router, prefill or decode)"));
}

std::string DefaultServedModelName(const std::string& model_path) {
  if (model_path.empty()) return "kvcanary-synthetic";
  std::string name = model_path.substr(model_path.find_last_of('/') + 1);
  const size_t dot = name.find_last_of('.');
  if (dot != std::string::npos && dot > 0) name.resize(dot);
  return name;
}

absl::StatusOr<UpProcess> StartUpProcess(const std::vector<std::string>& args) {
  std::vector<std::string> up_args = {"/proc/self/exe", "up"};
  up_args.insert(up_args.end(), args.begin(), args.end());
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    dup2(fds[1], STDOUT_FILENO);
    std::vector<char*> argv;
    for (auto& a : up_args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(fds[1]);
  UpProcess up;
  up.pid = pid;
  std::string line;
  std::vector<std::string> urls;
  char ch;
  while (urls.size() < 4 && read(fds[0], &ch, 1) == 1) {
    if (ch != '\n') {
      line.push_back(ch);
      continue;
    }
    std::vector<std::string> words = absl::StrSplit(line, ' ');
    if (words.size() >= 2) urls.push_back(words[1]);
    line.clear();
  }
  close(fds[0]);
  if (urls.size() < 4) {
    StopUpProcess(up);
    return absl::UnavailableError("kvcanary-engine up did not start");
  }
  up.router = urls[0];
  up.prefill = urls[1];
  up.decode = urls[2];
  up.trace_token_file = urls[3];
  return up;
}

void StopUpProcess(UpProcess& up) {
  if (up.pid <= 0) return;
  kill(up.pid, SIGTERM);
  waitpid(up.pid, nullptr, 0);
  up.pid = -1;
}

namespace {

// `up`'s private directory under $TMPDIR (removed with everything in it):
// the status of its children for the router (engine/supervisor_status.h),
// and the deployment's secrets where the operator named no files. With
// --tls and no certificate files, a fresh CA and node certificate there
// too.
class UpSecrets {
 public:
  absl::Status Init(const ServeOptions& o) {
    ASSIGN_OR_RETURN(dir_, TempDir::Create("kvcanary-up"));
    secret_ = o.internal_secret_file;
    trace_ = o.trace_token_file;
    tls_ = o.tls;
    const bool make_tls = o.up_tls && tls_.empty();
    for (std::string* f : {&secret_, &trace_}) {
      if (!f->empty()) continue;
      *f = dir_.File(f == &secret_ ? "internal.secret" : "trace.token");
      RETURN_IF_ERROR(SharedSecret::GenerateToFile(*f).status());
    }
    if (make_tls) {
      // The nodes dial each other at --host.
      ASSIGN_OR_RETURN(
          tls_, tls::WriteDeploymentCerts(dir_.path(),
                                          {o.host, "localhost", "127.0.0.1"}));
    }
    return absl::OkStatus();
  }
  std::string status_file() const { return dir_.File("status.json"); }
  const std::string& secret_file() const { return secret_; }
  const std::string& trace_file() const { return trace_; }
  // Empty without --tls.
  const tls::Files& tls() const { return tls_; }

 private:
  // The generated files' directory under $TMPDIR, removed with them.
  TempDir dir_;
  std::string secret_, trace_;
  tls::Files tls_;
};

// The router's command line under `up`: `common`, then its own flags.
std::vector<std::string> RouterArgs(const ServeOptions& o,
                                    std::vector<std::string> common,
                                    const std::string& prefill_url,
                                    const std::string& decode_url,
                                    const std::string& status_path,
                                    const std::string& trace_token_file) {
  std::vector<std::string> args = std::move(common);
  args.push_back(absl::StrCat("--port=", o.port));
  args.push_back("--tenants=" + o.tenants_path);
  args.push_back("--prefill=" + prefill_url);
  args.push_back("--decode=" + decode_url);
  args.push_back("--fault=" + o.faults.ToString());
  args.push_back(absl::StrCat("--node_pool_idle=", o.node_pool_idle));
  args.push_back(absl::StrCat("--http_max_unoccupied_per_address=",
                              o.http_max_unoccupied_per_address));
  args.push_back("--tenant_header=" + o.tenant_header);
  args.push_back(
      absl::StrCat("--chat_template=", ChatTemplateName(o.chat_template)));
  if (!o.served_model_name.empty()) {
    args.push_back("--served_model_name=" + o.served_model_name);
  }
  args.push_back("--up_status_file=" + status_path);
  args.push_back("--trace_token_file=" + trace_token_file);
  if (!o.access_log.path.empty()) {
    args.push_back("--access_log=" + o.access_log.path);
    args.push_back(
        absl::StrCat("--access_log_max_bytes=", o.access_log.max_bytes));
    args.push_back(absl::StrCat("--access_log_keep=", o.access_log.keep));
  }
  return args;
}

}  // namespace

absl::Status RunUp(const ServeOptions& o,
                   const std::vector<std::string>& node_args) {
  sigset_t stop = BlockStopSignals();
  // Whoever reads our stdout may stop reading (StartUpProcess reads the
  // URLs only): restart lines must not kill us.
  signal(SIGPIPE, SIG_IGN);
  // Declared first, so removed after the children have stopped.
  UpSecrets secrets;
  RETURN_IF_ERROR(secrets.Init(o));
  SupervisorOptions so;
  so.status_path = secrets.status_file();
  Supervisor children(so);
  std::vector<std::string> common;
  if (!o.model_path.empty()) common.push_back("--model=" + o.model_path);
  if (!o.tokenizer_path.empty()) {
    common.push_back("--tokenizer=" + o.tokenizer_path);
  }
  if (o.context != 0) common.push_back(absl::StrCat("--context=", o.context));
  common.push_back("--internal_secret_file=" + secrets.secret_file());
  const char* scheme = "http://";
  if (!secrets.tls().empty()) {
    common.push_back("--tls_cert=" + secrets.tls().cert);
    common.push_back("--tls_key=" + secrets.tls().key);
    common.push_back("--tls_ca=" + secrets.tls().ca);
    scheme = "https://";
  }
  std::vector<std::string> node = common;
  node.insert(node.end(), node_args.begin(), node_args.end());
  node.push_back("--trace_token_file=" + secrets.trace_file());
  node.push_back(absl::StrCat("--max_trace_readers=", o.max_trace_readers));
  // The prefill node's configuration names the decode node's KV port, and
  // the decode node's names the prefill node: the KV port is bound first,
  // here, and the socket handed to the decode process (and to each restart
  // of it), so no other process can take the port in between.
  ASSIGN_OR_RETURN(std::unique_ptr<kv::FrameListener> kv_listener,
                   kv::FrameListener::Listen(o.host, 0));
  const int kv_port = kv_listener->port();
  std::vector<std::string> prefill_args = node;
  prefill_args.push_back(
      absl::StrCat("--decode_kv=decode-0=", o.host, ":", kv_port));
  for (std::string& a : KvEventsArgs(o)) prefill_args.push_back(std::move(a));
  ASSIGN_OR_RETURN(const int prefill, children.Spawn("prefill", prefill_args));
  ASSIGN_OR_RETURN(const ReadyLine prefill_ready,
                   children.WaitReady(prefill, absl::Seconds(60)));
  const std::string prefill_url =
      absl::StrCat(scheme, o.host, ":", prefill_ready.http_port);
  std::vector<std::string> decode_args = node;
  decode_args.push_back("--prefill=" + prefill_url);
  decode_args.push_back(absl::StrCat("--kv_listen_fd=", kv_listener->fd()));
  decode_args.push_back("--name=decode-0");
  ASSIGN_OR_RETURN(const int decode,
                   children.Spawn("decode", decode_args, kv_listener->fd()));
  ASSIGN_OR_RETURN(const ReadyLine decode_ready,
                   children.WaitReady(decode, absl::Seconds(60)));
  const std::string decode_url =
      absl::StrCat(scheme, o.host, ":", decode_ready.http_port);
  ASSIGN_OR_RETURN(
      const int router,
      children.Spawn("router",
                     RouterArgs(o, common, prefill_url, decode_url,
                                so.status_path, secrets.trace_file())));
  ASSIGN_OR_RETURN(const ReadyLine router_ready,
                   children.WaitReady(router, absl::Seconds(60)));
  PrintReady(
      absl::StrCat("router http://", o.host, ":", router_ready.http_port));
  PrintReady("prefill " + prefill_url);
  PrintReady(absl::StrCat("decode ", decode_url, " kv=", decode_ready.kv_port));
  PrintReady("trace-token-file " + secrets.trace_file());
  if (!prefill_ready.kv_events.empty()) {
    PrintReady(absl::StrCat("kv-events ", prefill_ready.kv_events, " replay=",
                            prefill_ready.kv_events_replay.empty()
                                ? "off"
                                : prefill_ready.kv_events_replay));
  }
  // Serve until asked to stop, restarting whichever child dies.
  children.Run(stop);
  children.StopAll();
  return absl::OkStatus();
}

}  // namespace kvcanary::engine
