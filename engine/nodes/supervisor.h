// `kvcanary-engine up`'s children: one process per role (`serve --role=R`),
// each restarted when it dies, on the ports it first bound, so the URLs the
// others were given stay valid. Restarts back off exponentially (100 ms
// doubling to 5 s; back to 100 ms once a process has stayed up 10 s), and a
// restart that cannot bind its port (still held by someone) is one more
// failed start that backs off. Each restart prints a line on stdout:
//
//   exited role=decode pid=4242 exit=signal 9 restart_in_ms=100
//   restarted role=decode pid=4250 exit=signal 9 restarts=1 down_ms=412
//
// and the state of every role goes to the status file the router serves
// (engine/supervisor_status.h).
//
// Not thread-safe: one thread starts, watches and stops the children, and
// must live as long as they do (they die with it: PR_SET_PDEATHSIG).
#ifndef KVCANARY_ENGINE_NODES_SUPERVISOR_H_
#define KVCANARY_ENGINE_NODES_SUPERVISOR_H_

#include <signal.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/nodes/supervisor_status.h"

namespace kvcanary::engine {

struct RestartBackoff {
  absl::Duration initial = absl::Milliseconds(100);
  absl::Duration max = absl::Seconds(5);
  // A process up at least this long had its trouble behind it: the next
  // restart waits `initial` again.
  absl::Duration reset_after = absl::Seconds(10);

  // The wait before the next restart, after one that waited `previous`
  // (zero: none yet) and a process that stayed up `uptime`.
  absl::Duration Next(absl::Duration previous, absl::Duration uptime) const;
};

// A node's "ready role=R http=PORT [kv=PORT] [kv_events=tcp://H:P
// [kv_events_replay=tcp://H:P]]" line.
struct ReadyLine {
  int http_port = 0;
  int kv_port = 0;               // decode
  std::string kv_events;         // prefill: the KV event PUB socket
  std::string kv_events_replay;  // prefill: its replay socket
};
std::optional<ReadyLine> ParseReadyLine(absl::string_view line);

// How a process ended, from its wait status: "signal 9", "code 1".
std::string DescribeExit(int wait_status);

// `args` without any --port= or --kv_port=, then the ports of `ready` (no
// --kv_port where `args` pass an inherited KV listener, --kv_listen_fd=);
// likewise --kv_events= and --kv_events_replay= become the endpoints
// `ready` names, where it names them.
std::vector<std::string> PinPorts(const std::vector<std::string>& args,
                                  const ReadyLine& ready);

struct SupervisorOptions {
  RestartBackoff backoff;
  absl::Duration ready_timeout = absl::Seconds(60);
  std::string status_path;  // "": none written
};

class Supervisor {
 public:
  explicit Supervisor(SupervisorOptions options);
  ~Supervisor();  // StopAll()
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts `serve --role=<role> <args>` and returns its index. Its stdout is
  // read for the ready line; its stderr is ours. `inherit_fd` (-1: none),
  // a descriptor of ours, stays open under the same number in this child
  // and in every restart of it; it must outlive the supervisor's children.
  absl::StatusOr<int> Spawn(const std::string& role,
                            std::vector<std::string> args, int inherit_fd = -1);
  // Waits for child `index`'s ready line (kUnavailable if it dies or stays
  // silent); from then on, a restart of it binds the same ports.
  absl::StatusOr<ReadyLine> WaitReady(int index, absl::Duration timeout);
  // Restarts children as they die, until a signal of `stop` (blocked in
  // this thread) arrives.
  void Run(const sigset_t& stop);
  // SIGTERM to every child; SIGKILL to any still there after 10 s.
  void StopAll();

 private:
  enum class State { kStarting, kUp, kWaiting };
  struct Child {
    std::string role;
    std::vector<std::string> args;  // with the ports pinned once ready
    int inherit_fd = -1;
    State state = State::kStarting;
    pid_t pid = -1;
    int stdout_fd = -1;
    std::string partial_line;  // stdout read so far, before the ready line
    ReadyLine ready;
    absl::Time ready_deadline;  // kStarting
    absl::Time up_since;        // kUp
    absl::Time down_since;      // since the process died
    absl::Time restart_at;      // kWaiting
    absl::Duration backoff;     // the last wait before a restart
    int64_t restarts = 0;
    std::optional<std::string> last_exit;
  };

  absl::Status StartProcess(Child& c);
  // Reads what child `c` wrote; true once its ready line came.
  bool ReadStdout(Child& c);
  void Reap(Child& c);
  void OnExit(Child& c, int wait_status);
  void OnReady(Child& c);
  void CloseStdout(Child& c);
  void WriteStatus();
  // The next moment something is due: a restart, or a start's deadline.
  absl::Time NextDeadline() const;

  SupervisorOptions options_;
  std::vector<Child> children_;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_SUPERVISOR_H_
