// The state `kvcanary-engine up` keeps of its children, as it writes it to
// its status file for the router to serve (GET /health "supervisor", and
// kvcanary_engine_restarts_total on GET /metrics; docs/nodes.md):
//
//   {"format": "kvcanary-up-status/1", "pid": <up's pid>,
//    "roles": [{"role": "decode", "state": "up" | "restarting",
//               "pid": <current process, 0 while there is none>,
//               "port": <its HTTP port>, "restarts": <count>,
//               "last_exit": "signal 9" | "code 1" | null}, ...]}
//
// `up` replaces the file whole (write, then rename), so a reader never sees
// half of one.
#ifndef KVCANARY_ENGINE_NODES_SUPERVISOR_STATUS_H_
#define KVCANARY_ENGINE_NODES_SUPERVISOR_STATUS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvcanary::engine {

inline constexpr char kSupervisorStatusFormat[] = "kvcanary-up-status/1";

struct SupervisorStatus {
  struct Role {
    std::string role;   // prefill, decode or router
    std::string state;  // "up", or "restarting" (dead, or started not ready)
    int64_t pid = 0;    // 0: no process right now
    int port = 0;       // its HTTP port (the same across restarts)
    int64_t restarts = 0;
    std::optional<std::string> last_exit;  // how the last process ended
  };
  int64_t pid = 0;  // up's
  std::vector<Role> roles;

  void EncodeTo(std::string* out) const;
  // kDataLoss for anything but a whole, well-formed status of this format.
  static absl::StatusOr<SupervisorStatus> Decode(absl::string_view text);
  // Encodes to `path` + ".tmp", then renames it over `path`.
  absl::Status WriteFile(const std::string& path) const;
  static absl::StatusOr<SupervisorStatus> ReadFile(const std::string& path);
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_SUPERVISOR_STATUS_H_
