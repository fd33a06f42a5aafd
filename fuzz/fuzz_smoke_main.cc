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
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "engine/transfer/kv_transfer_format.h"
#include "fuzz/smoke_driver.h"

namespace kvcanary::engine::kv {
namespace {

void FixCrcs(std::string* s);

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
  Hello hello;
  for (size_t i = 0; i < hello.nonce.size(); ++i)
    hello.nonce[i] = static_cast<uint8_t>(i * 13);
  Auth auth;
  for (size_t i = 0; i < auth.proof.size(); ++i)
    auth.proof[i] = static_cast<uint8_t>(0xff - i);
  frames.push_back(hello);
  frames.push_back(auth);
  std::vector<std::string> out;
  std::string conversation;
  for (const Frame& f : frames) {
    std::string bytes;
    EncodeFrame(f, &bytes);
    conversation += bytes;
    out.push_back(std::move(bytes));
  }
  out.push_back(conversation);
  // A version-4 session as the decode node reads it: the handshake, then
  // two transfers one after another (Metadata, pages, Commit), each
  // answered with an Ack in the other direction.
  std::string session = out[frames.size() - 2] + out[frames.size() - 1];
  for (uint64_t request : {0x11223344ffffffffULL, 0x11223345ULL}) {
    Metadata next = m;
    next.request = RequestId(request);
    next.transfer_token[0] = static_cast<uint8_t>(request);
    std::string bytes;
    EncodeFrame(next, &bytes);
    for (size_t i = 1; i <= 4; ++i) {
      bytes += out[i];  // the Page seeds
    }
    EncodeFrame(Commit{next.request, 4, 20, 31}, &bytes);
    session += bytes;
    out.push_back(bytes);  // one transfer alone, as a kept session sends it
  }
  out.push_back(session);
  // The same header under the versions before and after this one.
  for (uint16_t version : {uint16_t{3}, uint16_t{5}}) {
    std::string old = out.front();
    old[4] = static_cast<char>(version & 0xff);
    old[5] = static_cast<char>(version >> 8);
    FixCrcs(&old);
    out.push_back(old);
  }
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

}  // namespace
}  // namespace kvcanary::engine::kv

int main(int argc, char** argv) {
  using namespace kvcanary::engine::kv;  // NOLINT: driver
  namespace fuzz = kvcanary::fuzz;
  const fuzz::SmokeArgs args = fuzz::ParseSmokeArgs(argc, argv);
  const std::vector<std::string> seeds = SeedFrames();
  if (!fuzz::RunFilesAndSeeds(args, seeds, "")) return 2;

  std::mt19937_64 rng(0x6b76746600000001ULL);  // fixed: reproducible runs
  std::map<std::string, int> verdicts;
  for (int64_t i = 0; i < args.iterations; ++i) {
    const std::string input = Mutate(seeds, rng);
    fuzz::RunInput(input);
    absl::StatusOr<Frame> one = DecodeOneFrame(input);
    ++verdicts[one.ok() ? std::string("ok: ") + FrameTypeName(TypeOf(*one))
                        : fuzz::Category(one.status(), 64, false)];
  }
  std::printf(
      "kv frame fuzz smoke: %lld mutated inputs, %zu seeds, %zu files\n",
      static_cast<long long>(args.iterations), seeds.size(), args.files.size());
  fuzz::PrintVerdicts(verdicts);
  return 0;
}
