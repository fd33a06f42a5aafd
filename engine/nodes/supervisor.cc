#include "engine/nodes/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace kvcanary::engine {
namespace {

// One line of output for people; a reader that went away is no reason to
// stop (up ignores SIGPIPE).
void PrintLine(const std::string& line) {
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

int64_t Ms(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

}  // namespace

absl::Duration RestartBackoff::Next(absl::Duration previous,
                                    absl::Duration uptime) const {
  if (previous <= absl::ZeroDuration() || uptime >= reset_after) return initial;
  return std::min(previous * 2, max);
}

std::optional<ReadyLine> ParseReadyLine(absl::string_view line) {
  if (!absl::StartsWith(line, "ready ")) return std::nullopt;
  ReadyLine r;
  for (absl::string_view field : absl::StrSplit(line, ' ')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(field, absl::MaxSplits('=', 1));
    if (kv.first == "kv_events") r.kv_events = std::string(kv.second);
    if (kv.first == "kv_events_replay") {
      r.kv_events_replay = std::string(kv.second);
    }
    int value = 0;
    if (!absl::SimpleAtoi(kv.second, &value)) continue;
    if (kv.first == "http") r.http_port = value;
    if (kv.first == "kv") r.kv_port = value;
  }
  if (r.http_port <= 0) return std::nullopt;
  return r;
}

std::string DescribeExit(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    return absl::StrCat("signal ", WTERMSIG(wait_status));
  }
  if (WIFEXITED(wait_status)) {
    return absl::StrCat("code ", WEXITSTATUS(wait_status));
  }
  return "unknown";
}

std::vector<std::string> PinPorts(const std::vector<std::string>& args,
                                  const ReadyLine& ready) {
  std::vector<std::string> out;
  bool inherited_kv = false;
  for (const std::string& a : args) {
    if (absl::StartsWith(a, "--port=") || absl::StartsWith(a, "--kv_port=") ||
        (!ready.kv_events.empty() && absl::StartsWith(a, "--kv_events=")) ||
        (!ready.kv_events_replay.empty() &&
         absl::StartsWith(a, "--kv_events_replay="))) {
      continue;
    }
    inherited_kv = inherited_kv || absl::StartsWith(a, "--kv_listen_fd=");
    out.push_back(a);
  }
  out.push_back(absl::StrCat("--port=", ready.http_port));
  if (ready.kv_port > 0 && !inherited_kv)
    out.push_back(absl::StrCat("--kv_port=", ready.kv_port));
  if (!ready.kv_events.empty()) {
    out.push_back("--kv_events=" + ready.kv_events);
  }
  if (!ready.kv_events_replay.empty()) {
    out.push_back("--kv_events_replay=" + ready.kv_events_replay);
  }
  return out;
}

Supervisor::Supervisor(SupervisorOptions options)
    : options_(std::move(options)) {}

Supervisor::~Supervisor() { StopAll(); }

absl::StatusOr<int> Supervisor::Spawn(const std::string& role,
                                      std::vector<std::string> args,
                                      int inherit_fd) {
  Child c;
  c.role = role;
  c.args = std::move(args);
  c.inherit_fd = inherit_fd;
  absl::Status started = StartProcess(c);
  if (!started.ok()) return started;
  children_.push_back(std::move(c));
  return static_cast<int>(children_.size() - 1);
}

absl::Status Supervisor::StartProcess(Child& c) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  std::vector<std::string> argv_s = {"/proc/self/exe", "serve",
                                     "--role=" + c.role};
  argv_s.insert(argv_s.end(), c.args.begin(), c.args.end());
  const pid_t parent = getpid();
  const int inherit_fd = c.inherit_fd;
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    // No orphans: die with the parent.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    dup2(fds[1], STDOUT_FILENO);
    // Ours is close-on-exec; the child's copy is not.
    if (inherit_fd >= 0 && fcntl(inherit_fd, F_SETFD, 0) != 0) _exit(1);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  c.pid = pid;
  c.stdout_fd = fds[0];
  c.partial_line.clear();
  c.state = State::kStarting;
  c.ready_deadline = absl::Now() + options_.ready_timeout;
  return absl::OkStatus();
}

bool Supervisor::ReadStdout(Child& c) {
  char buf[512];
  while (c.stdout_fd >= 0) {
    const ssize_t n = read(c.stdout_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;  // EAGAIN: nothing more for now
    if (n == 0) {
      CloseStdout(c);  // the process is going; waitpid will say how
      return false;
    }
    if (c.state != State::kStarting) continue;  // later output: dropped
    c.partial_line.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = c.partial_line.find('\n')) != std::string::npos) {
      const std::string line = c.partial_line.substr(0, nl);
      c.partial_line.erase(0, nl + 1);
      if (auto ready = ParseReadyLine(line)) {
        c.ready = *ready;
        return true;
      }
    }
  }
  return false;
}

absl::StatusOr<ReadyLine> Supervisor::WaitReady(int index,
                                                absl::Duration timeout) {
  Child& c = children_[index];
  const absl::Time deadline = absl::Now() + timeout;
  while (c.stdout_fd >= 0 && absl::Now() < deadline) {
    pollfd p{c.stdout_fd, POLLIN, 0};
    const int ms = static_cast<int>(
        std::clamp<int64_t>(Ms(deadline - absl::Now()), 1, 1000));
    if (poll(&p, 1, ms) <= 0) continue;
    if (ReadStdout(c)) {
      c.state = State::kUp;
      c.up_since = absl::Now();
      c.args = PinPorts(c.args, c.ready);
      WriteStatus();  // there before the URLs are printed
      return c.ready;
    }
  }
  return absl::UnavailableError(
      absl::StrCat("the ", c.role, " node did not start"));
}

void Supervisor::CloseStdout(Child& c) {
  if (c.stdout_fd >= 0) close(c.stdout_fd);
  c.stdout_fd = -1;
}

void Supervisor::Reap(Child& c) {
  int status = 0;
  if (c.pid > 0 && waitpid(c.pid, &status, WNOHANG) == c.pid) {
    OnExit(c, status);
  }
}

void Supervisor::OnExit(Child& c, int wait_status) {
  const absl::Time now = absl::Now();
  const absl::Duration uptime =
      c.state == State::kUp ? now - c.up_since : absl::ZeroDuration();
  if (c.state == State::kUp) c.down_since = now;
  const pid_t pid = c.pid;
  c.pid = -1;
  CloseStdout(c);
  c.last_exit = DescribeExit(wait_status);
  c.backoff = options_.backoff.Next(c.backoff, uptime);
  c.restart_at = now + c.backoff;
  c.state = State::kWaiting;
  PrintLine(absl::StrCat("exited role=", c.role, " pid=", pid, " exit=",
                         *c.last_exit, " restart_in_ms=", Ms(c.backoff)));
  WriteStatus();
}

void Supervisor::OnReady(Child& c) {
  c.state = State::kUp;
  c.up_since = absl::Now();
  PrintLine(absl::StrCat("restarted role=", c.role, " pid=", c.pid, " exit=",
                         c.last_exit.value_or("none"), " restarts=", c.restarts,
                         " down_ms=", Ms(c.up_since - c.down_since)));
  WriteStatus();
}

absl::Time Supervisor::NextDeadline() const {
  absl::Time next = absl::InfiniteFuture();
  for (const Child& c : children_) {
    if (c.state == State::kWaiting) next = std::min(next, c.restart_at);
    if (c.state == State::kStarting) next = std::min(next, c.ready_deadline);
  }
  return next;
}

void Supervisor::Run(const sigset_t& stop) {
  sigset_t mask = stop;
  sigaddset(&mask, SIGCHLD);  // wakes the poll below when a child dies
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  const int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  WriteStatus();
  while (true) {
    for (Child& c : children_) Reap(c);
    const absl::Time now = absl::Now();
    for (Child& c : children_) {
      if (c.state == State::kWaiting && c.restart_at <= now) {
        ++c.restarts;
        absl::Status started = StartProcess(c);
        if (!started.ok()) {  // fork or pipe failed: try again later
          c.restart_at = now + options_.backoff.max;
          std::fprintf(stderr, "up: cannot restart %s: %s\n", c.role.c_str(),
                       started.ToString().c_str());
        }
        WriteStatus();
      } else if (c.state == State::kStarting && c.ready_deadline <= now &&
                 c.pid > 0) {
        kill(c.pid, SIGKILL);  // silent too long: a failed start
      }
    }
    std::vector<pollfd> fds = {{sfd, POLLIN, 0}};
    std::vector<Child*> owners = {nullptr};
    for (Child& c : children_) {
      if (c.stdout_fd < 0) continue;
      fds.push_back({c.stdout_fd, POLLIN, 0});
      owners.push_back(&c);
    }
    const int timeout_ms = static_cast<int>(
        std::clamp<int64_t>(Ms(NextDeadline() - absl::Now()), 0, 1000));
    if (poll(fds.data(), fds.size(), timeout_ms) <= 0) continue;
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Child& c = *owners[i];
      if (ReadStdout(c) && c.state == State::kStarting) OnReady(c);
    }
    if (fds[0].revents != 0) {
      signalfd_siginfo info;
      bool stopping = false;
      while (read(sfd, &info, sizeof(info)) == sizeof(info)) {
        if (sigismember(&stop, static_cast<int>(info.ssi_signo)) == 1) {
          stopping = true;
        }
      }
      if (stopping) break;
    }
  }
  close(sfd);
}

void Supervisor::StopAll() {
  for (Child& c : children_) {
    if (c.pid > 0) kill(c.pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (Child& c : children_) {
    if (c.pid <= 0) continue;
    while (waitpid(c.pid, nullptr, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, nullptr, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    c.pid = -1;
    CloseStdout(c);
  }
  if (!options_.status_path.empty()) {
    std::remove(options_.status_path.c_str());
    options_.status_path.clear();
  }
}

void Supervisor::WriteStatus() {
  if (options_.status_path.empty()) return;
  SupervisorStatus s;
  s.pid = getpid();
  for (const Child& c : children_) {
    SupervisorStatus::Role r;
    r.role = c.role;
    r.state = c.state == State::kUp ? "up" : "restarting";
    r.pid = c.pid > 0 ? c.pid : 0;
    r.port = c.ready.http_port;
    r.restarts = c.restarts;
    r.last_exit = c.last_exit;
    s.roles.push_back(std::move(r));
  }
  absl::Status written = s.WriteFile(options_.status_path);
  if (!written.ok()) {
    std::fprintf(stderr, "up: %s\n", written.ToString().c_str());
  }
}

}  // namespace kvcanary::engine
