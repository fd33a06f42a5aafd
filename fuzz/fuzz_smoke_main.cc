// Runs the KV frame fuzz target (kv_frame_fuzz.cc) without libFuzzer, so
// every build, GCC included, exercises it: deterministic pseudo-random
// bytes and mutations of valid encoded frames (bit flips, truncations,
// splices, field rewrites with the CRCs fixed up so the payload checks are
// reached). A failed CHECK aborts; otherwise exits 0 and prints a summary.
//
// Usage: kvcanary_kv_frame_fuzz_smoke [ITERATIONS] [--write_corpus=DIR]
//                                     [FILE...]
//   ITERATIONS  mutated inputs to run (default 20000)
//   --write_corpus=DIR  also write the valid seed frames to DIR (a starting
//                       corpus for kvcanary_kv_frame_fuzzer)
//   FILE...     run these inputs too (a crash to reproduce, a corpus)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "common/crc32c.h"
#include "engine/transfer/kv_transfer_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace kvcanary::engine::kv {
namespace {

std::vector<std::string> SeedFrames() {
  std::vector<Frame> frames;
  Metadata m;
  // Low half all ones: one u32 rewrite away from the reserved id.
  m.request = RequestId(0x11223344ffffffffULL);
  m.tenant = TenantId(3);
  m.prompt_tokens = 20;
  m.reserved_pages = 2;
  m.page_tokens = 16;
  m.n_layers = 2;
  m.kv_heads = 4;
  m.head_dim = 8;
  frames.push_back(m);
  for (uint32_t slots : {0u, 1u, 4u, 16u}) {
    Page p;
    p.index = slots / 16;
    p.layer = 1;
    p.stamp.layer = 1;
    p.stamp.page = PageId(5);
    p.stamp.owner = StampIdentity{m.request, m.tenant, PageGeneration(2)};
    p.stamp.writer = p.stamp.owner;
    p.stamp.set_shared(slots == 16);  // a full page from the prefix cache
    p.stamp.filled = slots;
    p.slots = slots;
    p.kv_bytes.resize(size_t{2} * slots * 4 * 8 * 4);
    for (size_t i = 0; i < p.kv_bytes.size(); ++i) {
      p.kv_bytes[i] = static_cast<char>(i * 7 + slots);
    }
    frames.push_back(p);
  }
  frames.push_back(Commit{m.request, 4, 20, 31});
  frames.push_back(Abort{m.request, 10, "decode: pages received 1 != 4"});
  frames.push_back(Ack{m.request, 0, ""});
  frames.push_back(Ack{m.request, 15, std::string(300, 'm')});
  std::vector<std::string> out;
  std::string conversation;
  for (const Frame& f : frames) {
    std::string bytes;
    EncodeFrame(f, &bytes);
    conversation += bytes;
    out.push_back(std::move(bytes));
  }
  out.push_back(conversation);
  return out;
}

void Store32(std::string* s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*s)[at + i] = static_cast<char>(v >> (8 * i));
}
uint32_t Load32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= uint32_t{static_cast<uint8_t>(s[at + i])} << (8 * i);
  }
  return v;
}

// Recomputes the CRCs of the first frame in *s so that a rewrite of a field
// gets past them: the page CRC (if the payload is all there), then the
// header CRC.
void FixCrcs(std::string* s) {
  if (s->size() < kFrameHeaderSize) return;
  const uint32_t payload_size = Load32(*s, 8);
  if (static_cast<uint8_t>((*s)[6]) == static_cast<uint8_t>(FrameType::kPage) &&
      payload_size >= 4 && s->size() >= kFrameHeaderSize + payload_size) {
    const size_t crc_at = kFrameHeaderSize + payload_size - 4;
    Store32(s, crc_at, Crc32c(s->data() + kFrameHeaderSize, payload_size - 4));
  }
  Store32(s, 12, Crc32c(s->data(), 12));
}

uint32_t Interesting(std::mt19937_64& rng, size_t size) {
  const uint32_t values[] = {0,
                             1,
                             4,
                             15,
                             16,
                             20,
                             36,
                             kPageFixedPayloadSize - 1,
                             kPageFixedPayloadSize,
                             kMaxMessageSize,
                             kMaxMessageSize + 1,
                             static_cast<uint32_t>(size),
                             static_cast<uint32_t>(size) - 1,
                             static_cast<uint32_t>(size) + 1,
                             kMaxPayloadSize,
                             kMaxPayloadSize + 1,
                             0x7fffffffu,
                             0xffffffffu};
  if (rng() % 4 == 0) return static_cast<uint32_t>(rng());
  return values[rng() % (sizeof(values) / sizeof(values[0]))];
}

std::string Mutate(const std::vector<std::string>& seeds,
                   std::mt19937_64& rng) {
  auto pick = [&] { return seeds[rng() % seeds.size()]; };
  std::string s = pick();
  switch (rng() % 8) {
    case 0: {  // random bytes, sometimes behind a valid magic
      s.assign(rng() % 200, '\0');
      for (char& c : s) c = static_cast<char>(rng());
      if (rng() % 2) s = pick().substr(0, 4) + s;
      break;
    }
    case 1: {  // bit flips
      for (int n = 1 + rng() % 4; n > 0 && !s.empty(); --n) {
        s[rng() % s.size()] ^= static_cast<char>(1 << (rng() % 8));
      }
      break;
    }
    case 2:  // truncation
      s.resize(rng() % (s.size() + 1));
      break;
    case 3: {  // splice: a prefix of one seed, a suffix of another
      const std::string t = pick();
      s = s.substr(0, rng() % (s.size() + 1)) +
          t.substr(rng() % (t.size() + 1));
      break;
    }
    case 4: {  // rewrite a header byte (version, type, flags, size), CRC fixed
      const size_t at = 4 + rng() % 8;
      if (at >= 8 && rng() % 2) {
        Store32(&s, 8, Interesting(rng, s.size() - kFrameHeaderSize));
      } else {
        s[at] = static_cast<char>(rng() % 3 == 0 ? rng() % 8 : rng());
      }
      FixCrcs(&s);
      break;
    }
    case 5: {  // rewrite a payload byte, CRCs fixed
      if (s.size() > kFrameHeaderSize) {
        s[kFrameHeaderSize + rng() % (s.size() - kFrameHeaderSize)] =
            static_cast<char>(rng());
      }
      FixCrcs(&s);
      break;
    }
    case 6: {  // rewrite a payload u32 (kv_size, message_size, code...)
      if (s.size() >= kFrameHeaderSize + 4) {
        const size_t span = s.size() - kFrameHeaderSize - 3;
        size_t at = kFrameHeaderSize + rng() % span;
        if (rng() % 2) {  // the u32 fields the size checks depend on
          // Request id halves (0xffffffff in the high half of the seed's
          // id makes the reserved id); Abort/Ack: code, message_size;
          // Page: slots, kv_size.
          const size_t fields[] = {0,
                                   4,
                                   8,
                                   12,
                                   8 + PageStamp::kEncodedSizeBytes,
                                   12 + PageStamp::kEncodedSizeBytes};
          at = kFrameHeaderSize + fields[rng() % 6];
          if (at + 4 > s.size()) at = kFrameHeaderSize;
        }
        Store32(&s, at, Interesting(rng, s.size()));
      }
      FixCrcs(&s);
      break;
    }
    case 7: {  // valid frames back to back, then cut or flipped
      for (int n = rng() % 3; n >= 0; --n) s += pick();
      if (rng() % 2) s.resize(rng() % (s.size() + 1));
      if (rng() % 2 && !s.empty()) s[rng() % s.size()] ^= 0x20;
      break;
    }
  }
  return s;
}

// The error message with numbers dropped: groups failures by their check.
std::string Category(const absl::Status& status) {
  const absl::string_view m = status.message();
  std::string out;
  for (size_t i = 0; i < m.size() && out.size() < 64; ++i) {
    if (m.substr(i, 2) == "0x") {
      i += 2;
      while (i < m.size() && absl::ascii_isxdigit(m[i])) ++i;
      out += '#';
      --i;
    } else if (absl::ascii_isdigit(m[i])) {
      while (i + 1 < m.size() && absl::ascii_isdigit(m[i + 1])) ++i;
      out += '#';
    } else {
      out += m[i];
    }
  }
  return out;
}

void Run(const std::string& input) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()),
                         input.size());
}

}  // namespace
}  // namespace kvcanary::engine::kv

int main(int argc, char** argv) {
  using namespace kvcanary::engine::kv;  // NOLINT: driver
  int64_t iterations = 20000;
  std::vector<std::string> files;
  std::string corpus_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    int64_t n = 0;
    if (absl::StartsWith(arg, "--write_corpus=")) {
      corpus_dir = arg.substr(sizeof("--write_corpus=") - 1);
    } else if (absl::SimpleAtoi(arg, &n) && n >= 0) {
      iterations = n;
    } else {
      files.push_back(arg);
    }
  }
  const std::vector<std::string> seeds = SeedFrames();
  for (size_t i = 0; i < seeds.size() && !corpus_dir.empty(); ++i) {
    std::ofstream(corpus_dir + "/seed_" + std::to_string(i), std::ios::binary)
        << seeds[i];
  }
  for (const std::string& path : files) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "cannot read %s\n", path.c_str());
      return 2;
    }
    Run(std::string(std::istreambuf_iterator<char>(f), {}));
  }
  for (const std::string& seed : seeds) Run(seed);

  std::mt19937_64 rng(0x6b76746600000001ULL);  // fixed: reproducible runs
  std::map<std::string, int> verdicts;
  for (int64_t i = 0; i < iterations; ++i) {
    const std::string input = Mutate(seeds, rng);
    Run(input);
    absl::StatusOr<Frame> one = DecodeOneFrame(input);
    ++verdicts[one.ok() ? std::string("ok: ") + FrameTypeName(TypeOf(*one))
                        : Category(one.status())];
  }
  std::printf(
      "kv frame fuzz smoke: %lld mutated inputs, %zu seeds, %zu files\n",
      static_cast<long long>(iterations), seeds.size(), files.size());
  for (const auto& [verdict, count] : verdicts) {
    std::printf("  %6d  %s\n", count, verdict.c_str());
  }
  return 0;
}
