// What the fuzz smoke drivers (fuzz_smoke_main.cc, gguf_fuzz_smoke_main.cc)
// share: their command line, the files and seeds they run before the
// mutations, grouping failures by their check, and the summary. Each driver
// keeps its own seeds and mutations.
//
// Command line: [ITERATIONS] [--write_corpus=DIR] [FILE...]
#ifndef KVCANARY_FUZZ_SMOKE_DRIVER_H_
#define KVCANARY_FUZZ_SMOKE_DRIVER_H_

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace kvcanary::fuzz {

inline void RunInput(const std::string& input) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()),
                         input.size());
}

struct SmokeArgs {
  int64_t iterations = 20000;
  std::vector<std::string> files;
  std::string corpus_dir;  // "": none written
};

inline SmokeArgs ParseSmokeArgs(int argc, char** argv) {
  SmokeArgs a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    int64_t n = 0;
    if (absl::StartsWith(arg, "--write_corpus=")) {
      a.corpus_dir = arg.substr(sizeof("--write_corpus=") - 1);
    } else if (absl::SimpleAtoi(arg, &n) && n >= 0) {
      a.iterations = n;
    } else {
      a.files.push_back(arg);
    }
  }
  return a;
}

// Writes the seeds to --write_corpus (as seed_<i><suffix>), then runs the
// files named and the seeds. false (after saying so) if a file cannot be
// read.
inline bool RunFilesAndSeeds(const SmokeArgs& a,
                             const std::vector<std::string>& seeds,
                             const std::string& suffix) {
  for (size_t i = 0; i < seeds.size() && !a.corpus_dir.empty(); ++i) {
    std::ofstream(a.corpus_dir + "/seed_" + std::to_string(i) + suffix,
                  std::ios::binary)
        << seeds[i];
  }
  for (const std::string& path : a.files) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "cannot read %s\n", path.c_str());
      return false;
    }
    RunInput(std::string(std::istreambuf_iterator<char>(f), {}));
  }
  for (const std::string& seed : seeds) RunInput(seed);
  return true;
}

// The error message with numbers dropped (and, with `mask_quoted`, quoted
// names): groups failures by their check. At most `max_chars` characters.
inline std::string Category(const absl::Status& status, size_t max_chars,
                            bool mask_quoted) {
  const absl::string_view m = status.message();
  std::string out;
  for (size_t i = 0; i < m.size() && out.size() < max_chars; ++i) {
    if (m.substr(i, 2) == "0x") {
      i += 2;
      while (i < m.size() && absl::ascii_isxdigit(m[i])) ++i;
      out += '#';
      --i;
    } else if (absl::ascii_isdigit(m[i])) {
      while (i + 1 < m.size() && absl::ascii_isdigit(m[i + 1])) ++i;
      out += '#';
    } else if (mask_quoted && m[i] == '\'') {  // 'blk.0.attn_q.weight'
      const size_t end = m.find('\'', i + 1);
      out += "'*'";
      i = end == absl::string_view::npos ? m.size() : end;
    } else {
      out += m[i];
    }
  }
  return out;
}

inline void PrintVerdicts(const std::map<std::string, int>& verdicts) {
  for (const auto& [verdict, count] : verdicts) {
    std::printf("  %6d  %s\n", count, verdict.c_str());
  }
}

}  // namespace kvcanary::fuzz

#endif  // KVCANARY_FUZZ_SMOKE_DRIVER_H_
