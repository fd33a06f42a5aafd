// Runs the KV-cache event fuzz target (kv_events_fuzz.cc) without
// libFuzzer, so every build, GCC included, exercises it: the real engines'
// payloads (tests/auditor/testdata/kv_events/*.hex) and their mutations
// (bit flips, byte rewrites to msgpack type markers, truncations, splices,
// insertions), then random bytes. A failed CHECK aborts; otherwise exits 0.
//
// Usage: kvcanary_kv_events_fuzz_smoke FIXTURE_DIR [ITERATIONS]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void Run(const std::string& s) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// The payloads of the .hex fixtures in `dir` (# lines skipped).
std::vector<std::string> Seeds(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".hex") continue;
    std::ifstream in(entry.path());
    std::string line, hex;
    while (std::getline(in, line)) {
      if (!line.empty() && line[0] == '#') continue;
      for (char c : line) {
        if (!isspace(static_cast<unsigned char>(c))) hex.push_back(c);
      }
    }
    out.push_back(absl::HexStringToBytes(hex));
  }
  return out;
}

std::string Mutate(std::string s, const std::vector<std::string>& seeds,
                   std::mt19937_64& rng) {
  // Markers that change a value's type or length: the decoder's edges.
  static constexpr uint8_t kMarkers[] = {
      0xc0, 0xc2, 0xc4, 0xc5, 0xca, 0xcb, 0xcc, 0xcf, 0xd0, 0xd3, 0xd9, 0xdc,
      0xdd, 0xde, 0xdf, 0x90, 0x9f, 0x80, 0x8f, 0xa0, 0xbf, 0xff, 0x7f, 0x00};
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < edits && !s.empty(); ++i) {
    const size_t at = rng() % s.size();
    switch (rng() % 6) {
      case 0:
        s[at] = static_cast<char>(s[at] ^ (1 << (rng() % 8)));
        break;
      case 1:
        s[at] = static_cast<char>(kMarkers[rng() % sizeof(kMarkers)]);
        break;
      case 2:
        s.resize(at);
        break;
      case 3: {
        const std::string& o = seeds[rng() % seeds.size()];
        s = s.substr(0, at) + o.substr(rng() % (o.size() + 1));
        break;
      }
      case 4:
        s.insert(at, 1 + rng() % 8, static_cast<char>(rng()));
        break;
      default:
        s.erase(at, 1 + rng() % 8);
        break;
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FIXTURE_DIR [ITERATIONS]\n", argv[0]);
    return 2;
  }
  const std::vector<std::string> seeds = Seeds(argv[1]);
  if (seeds.empty()) {
    std::fprintf(stderr, "no .hex fixtures in %s\n", argv[1]);
    return 2;
  }
  const long iterations = argc > 2 ? std::atol(argv[2]) : 50000;
  std::mt19937_64 rng(1);
  for (const std::string& s : seeds) Run(s);
  for (long i = 0; i < iterations; ++i) {
    Run(Mutate(seeds[rng() % seeds.size()], seeds, rng));
  }
  for (long i = 0; i < iterations / 10; ++i) {
    std::string junk(rng() % 256, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    Run(junk);
  }
  std::printf("kv events fuzz smoke: %zu seeds, %ld mutated, %ld random: ok\n",
              seeds.size(), iterations, iterations / 10);
  return 0;
}
