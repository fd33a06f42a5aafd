// Runs the strict JSON fuzz target (json_strict_fuzz.cc) without libFuzzer,
// so every build, GCC included, exercises it: request bodies as the router
// and the nodes take them, and their mutations with JSON's own bytes (and a
// NUL) replaced, inserted or erased, then random bytes. A failed CHECK
// aborts; fewer than 1% of the mutations parsing (the checks on accepted
// bodies barely ran) exits 1; otherwise exits 0 and prints a summary.
//
// Usage: kvcanary_json_strict_fuzz_smoke [ITERATIONS] [--write_corpus=DIR]
//                                        [FILE...]
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/json_strict.h"
#include "fuzz/smoke_driver.h"

namespace {

const std::vector<std::string>& Seeds() {
  static const std::vector<std::string> kSeeds = {
      R"({"prompt":"hi","max_tokens":1,"stop":["a","b"],"seed":7})",
      R"({"model":"m","messages":[{"role":"user","content":"x\u00e9"}],)"
      R"("top_p":0.5,"stream":true,"stream_options":{"include_usage":true}})",
      R"({"request_id":9,"tenant_id":1,"prompt":[1,5,9],"reserved_pages":1,)"
      R"("transfer_token":"00112233445566778899aabbccddeeff"})",
      R"([1,-2.5e3,true,false,null,{"a":{"b":[]}},"\"\\\/\b\f\n\r\t"])"};
  return kSeeds;
}

std::string Mutate(std::string s, std::mt19937_64& rng) {
  static constexpr char kBytes[] = "{}[],:\"\\ 0-e.tfn\0xu";
  for (int edits = 1 + static_cast<int>(rng() % 3); edits > 0 && !s.empty();
       --edits) {
    const size_t at = rng() % s.size();
    const char c = kBytes[rng() % (sizeof(kBytes) - 1)];
    switch (rng() % 3) {
      case 0:
        s[at] = c;
        break;
      case 1:
        s.insert(at, 1, c);
        break;
      default:
        s.erase(at, 1);
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvcanary::fuzz;
  const SmokeArgs a = ParseSmokeArgs(argc, argv);
  if (!RunFilesAndSeeds(a, Seeds(), ".json")) return 1;
  std::mt19937_64 rng(1);
  int64_t accepted = 0;  // mutations that still parse: the checks on
                         // accepted bodies ran
  for (int64_t i = 0; i < a.iterations; ++i) {
    const std::string input = Mutate(Seeds()[rng() % Seeds().size()], rng);
    RunInput(input);
    accepted += kvcanary::ParseJsonStrict(input).ok() ? 1 : 0;
  }
  if (accepted * 100 < a.iterations) {
    std::fprintf(stderr, "only %lld of %lld mutations parsed\n",
                 static_cast<long long>(accepted),
                 static_cast<long long>(a.iterations));
    return 1;
  }
  for (int64_t i = 0; i < a.iterations / 10; ++i) {
    std::string junk(rng() % 64, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    RunInput(junk);
  }
  std::printf(
      "json strict fuzz smoke: %zu seeds, %lld mutated (%lld parsed), %lld "
      "random: ok\n",
      Seeds().size(), static_cast<long long>(a.iterations),
      static_cast<long long>(accepted),
      static_cast<long long>(a.iterations / 10));
  return 0;
}
