// The machine a benchmark ran on, printed at the top of its output: figures
// are only comparable on the same machine, and ratios measured in one run
// are the ones that travel.
#ifndef KVCANARY_BENCH_MACHINE_H_
#define KVCANARY_BENCH_MACHINE_H_

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace kvcanary::bench {

// "CPU model, N cores online, load average L (1 min)" from /proc/cpuinfo,
// sysconf and /proc/loadavg; "unknown CPU" where /proc/cpuinfo names none.
inline std::string MachineLine() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) {
        model = line.substr(colon + 2);
      }
      break;
    }
  }
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  std::string load = "?";
  std::ifstream loadavg("/proc/loadavg");
  loadavg >> load;
  return model + ", " + std::to_string(cores) + " cores online, load average " +
         load + " (1 min)";
}

inline void PrintMachine() {
  std::printf("machine: %s\n", MachineLine().c_str());
}

}  // namespace kvcanary::bench

#endif  // KVCANARY_BENCH_MACHINE_H_
