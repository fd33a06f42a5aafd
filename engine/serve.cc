#include "engine/serve.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "engine/decode_node.h"
#include "engine/model.h"
#include "engine/router.h"
#include "engine/supervisor.h"
#include "engine/tenants.h"
#include "engine/tokenizer.h"

namespace kvcanary::engine {
namespace {

absl::StatusOr<Model> LoadModel(const ServeOptions& o) {
  if (o.model_path.empty()) return DefaultModel();
  return LoadLlama2cModel(o.model_path);
}

absl::StatusOr<Tokenizer> LoadTokenizer(const ServeOptions& o, int vocab_size) {
  if (o.model_path.empty()) return Tokenizer::Default(vocab_size);
  if (o.tokenizer_path.empty())
    return absl::InvalidArgumentError("--model needs --tokenizer");
  return Tokenizer::Load(o.tokenizer_path, vocab_size);
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

}  // namespace

absl::Status RunServe(const ServeOptions& o) {
  sigset_t stop = BlockStopSignals();
  ASSIGN_OR_RETURN(Model model, LoadModel(o));
  if (o.role == "prefill") {
    PrefillNodeOptions p;
    p.host = o.host;
    p.http_port = o.port;
    p.max_prompt_tokens = o.max_prompt_tokens;
    p.max_waiting = o.max_waiting;
    p.engine = o.engine;
    p.damage = o.damage;
    p.faults = o.faults;
    p.trace = o.trace;
    p.transfer_timeout = o.transfer_timeout;
    PrefillNode node(&model, p);
    RETURN_IF_ERROR(node.Start());
    return ServeUntilSignal(
        node, absl::StrCat("ready role=prefill http=", node.http_port()), stop);
  }
  if (o.role == "decode") {
    DecodeNodeOptions d;
    d.host = o.host;
    d.http_port = o.port;
    d.kv_port = o.kv_port;
    d.max_prompt_tokens = o.max_prompt_tokens;
    d.max_waiting = o.max_waiting;
    d.engine = o.engine;
    d.test_receive_delay = o.test_receive_delay;
    d.test_receive_bytes_per_s = o.test_receive_bytes_per_s;
    d.transfer_timeout = o.transfer_timeout;
    d.metadata_slots = o.metadata_slots;
    d.faults = o.faults;
    d.trace = o.trace;
    DecodeNode node(&model, d);
    RETURN_IF_ERROR(node.Start());
    return ServeUntilSignal(
        node,
        absl::StrCat("ready role=decode http=", node.http_port(),
                     " kv=", node.kv_port()),
        stop);
  }
  if (o.role == "router") {
    ASSIGN_OR_RETURN(Tokenizer tokenizer,
                     LoadTokenizer(o, model.config.vocab_size));
    if (o.tenants_path.empty())
      return absl::InvalidArgumentError("the router needs --tenants");
    ASSIGN_OR_RETURN(TenantRegistry tenants,
                     TenantRegistry::LoadFile(o.tenants_path));
    RouterOptions r;
    r.host = o.host;
    r.http_port = o.port;
    r.prefill_urls = o.prefill_urls;
    r.decode_urls = o.decode_urls;
    r.max_in_flight = o.max_in_flight;
    r.faults = o.faults;
    r.access_log = o.access_log;
    r.up_status_file = o.up_status_file;
    Router router(&tokenizer, &tenants, r);
    RETURN_IF_ERROR(router.Start());
    return ServeUntilSignal(
        router, absl::StrCat("ready role=router http=", router.http_port()),
        stop);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown --role '", o.role, "' (want router, prefill or decode)"));
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
  while (urls.size() < 3 && read(fds[0], &ch, 1) == 1) {
    if (ch != '\n') {
      line.push_back(ch);
      continue;
    }
    std::vector<std::string> words = absl::StrSplit(line, ' ');
    if (words.size() >= 2) urls.push_back(words[1]);
    line.clear();
  }
  close(fds[0]);
  if (urls.size() < 3) {
    StopUpProcess(up);
    return absl::UnavailableError("kvcanary-engine up did not start");
  }
  up.router = urls[0];
  up.prefill = urls[1];
  up.decode = urls[2];
  return up;
}

void StopUpProcess(UpProcess& up) {
  if (up.pid <= 0) return;
  kill(up.pid, SIGTERM);
  waitpid(up.pid, nullptr, 0);
  up.pid = -1;
}

namespace {

// Where `up` writes the status of its children for the router
// (engine/supervisor_status.h): in $TMPDIR (or /tmp), removed on exit.
std::string UpStatusPath() {
  const char* tmp = std::getenv("TMPDIR");
  return absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                      "/kvcanary-up-", getpid(), ".status.json");
}

}  // namespace

absl::Status RunUp(const ServeOptions& o,
                   const std::vector<std::string>& node_args) {
  sigset_t stop = BlockStopSignals();
  // Whoever reads our stdout may stop reading (StartUpProcess reads the
  // URLs only): restart lines must not kill us.
  signal(SIGPIPE, SIG_IGN);
  SupervisorOptions so;
  so.status_path = UpStatusPath();
  Supervisor children(so);
  std::vector<std::string> model_args;
  if (!o.model_path.empty()) {
    model_args = {"--model=" + o.model_path, "--tokenizer=" + o.tokenizer_path};
  }
  std::vector<std::string> node = model_args;
  node.insert(node.end(), node_args.begin(), node_args.end());
  ASSIGN_OR_RETURN(const int prefill, children.Spawn("prefill", node));
  ASSIGN_OR_RETURN(const int decode, children.Spawn("decode", node));
  ASSIGN_OR_RETURN(const ReadyLine prefill_ready,
                   children.WaitReady(prefill, absl::Seconds(60)));
  ASSIGN_OR_RETURN(const ReadyLine decode_ready,
                   children.WaitReady(decode, absl::Seconds(60)));
  const std::string prefill_url =
      absl::StrCat("http://", o.host, ":", prefill_ready.http_port);
  const std::string decode_url =
      absl::StrCat("http://", o.host, ":", decode_ready.http_port);
  std::vector<std::string> router_args = model_args;
  router_args.push_back(absl::StrCat("--port=", o.port));
  router_args.push_back("--tenants=" + o.tenants_path);
  router_args.push_back("--prefill=" + prefill_url);
  router_args.push_back("--decode=" + decode_url);
  router_args.push_back("--fault=" + o.faults.ToString());
  router_args.push_back("--up_status_file=" + so.status_path);
  if (!o.access_log.path.empty()) {
    router_args.push_back("--access_log=" + o.access_log.path);
    router_args.push_back(
        absl::StrCat("--access_log_max_bytes=", o.access_log.max_bytes));
    router_args.push_back(
        absl::StrCat("--access_log_keep=", o.access_log.keep));
  }
  ASSIGN_OR_RETURN(const int router, children.Spawn("router", router_args));
  ASSIGN_OR_RETURN(const ReadyLine router_ready,
                   children.WaitReady(router, absl::Seconds(60)));
  PrintReady(
      absl::StrCat("router http://", o.host, ":", router_ready.http_port));
  PrintReady("prefill " + prefill_url);
  PrintReady(absl::StrCat("decode ", decode_url, " kv=", decode_ready.kv_port));
  // Serve until asked to stop, restarting whichever child dies.
  children.Run(stop);
  children.StopAll();
  return absl::OkStatus();
}

}  // namespace kvcanary::engine
