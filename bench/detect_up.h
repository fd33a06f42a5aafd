// The processes kvcanary-bench-detect starts: `kvcanary-engine up` with a
// configuration's flags (its URLs read from its stdout), and the child
// processes the auditor's campaigns run as.
#ifndef KVCANARY_BENCH_DETECT_UP_H_
#define KVCANARY_BENCH_DETECT_UP_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "bench/detect_matrix.h"

namespace kvcanary::bench {

// Where kvcanary-engine and kvcanary-auditor are: --bin_dir, else where
// the build put them.
std::string BinDir();

// A child process; stdout to a pipe (`read_lines`) or to /dev/null.
struct Child {
  pid_t pid = -1;
  int out = -1;
};

Child Spawn(const std::string& bin, const std::vector<std::string>& args,
            bool pipe_out);

// The child's exit status; -1 where it did not exit normally.
int Wait(pid_t pid);

// `kvcanary-engine up` with a configuration's flags.
class Up {
 public:
  Up(const Config& c, const std::string& dir);
  ~Up();
  bool ok() const { return urls_.count("trace-token-file") > 0; }
  std::string url(const std::string& role) const {
    auto it = urls_.find(role);
    return it == urls_.end() ? "" : it->second;
  }

 private:
  Child child_;
  std::map<std::string, std::string> urls_;
};

}  // namespace kvcanary::bench

#endif  // KVCANARY_BENCH_DETECT_UP_H_
