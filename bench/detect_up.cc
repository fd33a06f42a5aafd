// `kvcanary-engine up` for one configuration of kvcanary-bench-detect, and
// the fork/exec and wait of the bench's child processes.
#include "bench/detect_up.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/detect_flags.h"

namespace kvcanary::bench {
namespace {

std::string ReadLine(int fd) {
  std::string line;
  char ch;
  while (read(fd, &ch, 1) == 1 && ch != '\n') line.push_back(ch);
  return line;
}

}  // namespace

std::string BinDir() {
  const std::string dir = absl::GetFlag(FLAGS_bin_dir);
  return dir.empty() ? KVCANARY_BIN_DIR : dir;
}

Child Spawn(const std::string& bin, const std::vector<std::string>& args,
            bool pipe_out) {
  int fds[2] = {-1, -1};
  if (pipe_out && pipe(fds) != 0) return {};
  Child c;
  c.pid = fork();
  if (c.pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    const int null = open("/dev/null", O_WRONLY);
    dup2(pipe_out ? fds[1] : null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(bin.c_str()));
    for (const std::string& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  if (pipe_out) {
    close(fds[1]);
    c.out = fds[0];
  }
  return c;
}

int Wait(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Up::Up(const Config& c, const std::string& dir) {
  std::vector<std::string> args = {"up", "--port=0",
                                   "--tenants=" + dir + "/engine.json",
                                   "--max_waiting=1024"};
  const std::string model = absl::GetFlag(FLAGS_model);
  if (!model.empty()) {
    args.push_back("--model=" + model);
    args.push_back("--tokenizer=" + absl::GetFlag(FLAGS_tokenizer));
  }
  if (absl::GetFlag(FLAGS_api) == "chat") {
    args.push_back("--chat-template=kvcanary");
  }
  args.push_back("--numerics=" + absl::GetFlag(FLAGS_numerics));
  bool kv_events = false;
  for (const std::string& m : c.modes) kv_events |= m == "kv_events";
  if (kv_events) args.push_back("--kv-events=tcp://127.0.0.1:0");
  args.insert(args.end(), c.flags.begin(), c.flags.end());
  child_ = Spawn(BinDir() + "/kvcanary-engine", args, true);
  if (child_.pid < 0) return;
  // router, prefill, decode, trace-token-file, then kv-events if asked.
  for (int i = 0; i < 4 + (kv_events ? 1 : 0); ++i) {
    const std::string line = ReadLine(child_.out);
    const size_t a = line.find(' ');
    if (a == std::string::npos) return;
    const size_t b = line.find(' ', a + 1);
    const std::string value = line.substr(
        a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
    urls_[line.substr(0, a)] = value;
  }
}

Up::~Up() {
  if (child_.pid > 0) {
    kill(child_.pid, SIGTERM);
    Wait(child_.pid);
  }
  if (child_.out >= 0) close(child_.out);
}

}  // namespace kvcanary::bench
