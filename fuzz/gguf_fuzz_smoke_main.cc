// Runs the GGUF fuzz target (gguf_fuzz.cc) without libFuzzer, so every
// build, GCC included, exercises it: deterministic mutations of small valid
// GGUF models the engine writes in memory (F32 with a tokenizer, Q8_0 with
// F16 fallbacks, F16 with a tied classifier and no tokenizer): bit flips,
// truncations, splices, header fields rewritten with awkward values, and
// structured edits (a tensor's dims, type, offset or name; a metadata
// value's type or value) re-encoded around the same tensor data so that the
// model checks behind the header are reached. A failed CHECK aborts;
// otherwise exits 0 and prints how the inputs were judged.
//
// Usage: kvcanary_gguf_fuzz_smoke [ITERATIONS] [--write_corpus=DIR] [FILE...]
//   ITERATIONS  mutated inputs to run (default 20000)
//   --write_corpus=DIR  also write the seed files to DIR (a starting corpus
//                       for kvcanary_gguf_fuzzer)
//   FILE...     run these inputs too (a crash to reproduce, a corpus)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/wire.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_model.h"
#include "fuzz/smoke_driver.h"

namespace kvcanary::engine {
namespace {

std::string Encode(const Model& model, const Tokenizer* tokenizer,
                   GgufWeightType type) {
  std::string out;
  const absl::Status s =
      EncodeGgufModel(model, tokenizer, type, [&](absl::string_view b) {
        out.append(b.data(), b.size());
        return absl::OkStatus();
      });
  if (!s.ok()) std::abort();
  return out;
}

// Small models: dim 32 (whole Q8_0 blocks), hidden 48 (ffn_down falls back
// to F16), vocab 354 (the default tokenizer's least), context 64.
std::vector<std::string> Seeds() {
  ModelConfig c;
  c.dim = 32;
  c.hidden_dim = 48;
  c.n_layers = 1;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 354;
  c.seq_len = 64;
  c.shared_classifier = false;
  const Model own = SyntheticModel(c, 1);
  c.shared_classifier = true;
  c.n_kv_heads = 4;
  const Model tied = SyntheticModel(c, 2);
  const Tokenizer tokenizer = Tokenizer::Default(354);
  return {Encode(own, &tokenizer, GgufWeightType::kF32),
          Encode(own, &tokenizer, GgufWeightType::kQ8_0),
          Encode(tied, nullptr, GgufWeightType::kF16)};
}

uint64_t Interesting(std::mt19937_64& rng, uint64_t size) {
  const uint64_t values[] = {0,
                             1,
                             2,
                             3,
                             4,
                             7,
                             8,
                             9,
                             12,
                             30,
                             31,
                             32,
                             33,
                             64,
                             99,
                             258,
                             259,
                             354,
                             size,
                             size - 1,
                             size + 1,
                             1u << 16,
                             0x7fffffff,
                             0xffffffff,
                             uint64_t{1} << 32,
                             uint64_t{1} << 62,
                             ~uint64_t{0}};
  if (rng() % 4 == 0) return rng();
  return values[rng() % (sizeof(values) / sizeof(values[0]))];
}

// A structured edit of the decoded header, re-encoded around the same data.
std::string EditHeader(const std::string& seed, std::mt19937_64& rng) {
  absl::StatusOr<gguf::File> decoded = gguf::File::Decode(seed);
  if (!decoded.ok()) std::abort();
  gguf::File f = *decoded;
  const std::string data = seed.substr(f.data_offset);
  if (rng() % 2 == 0) {
    gguf::TensorInfo& t = f.tensors[rng() % f.tensors.size()];
    switch (rng() % 5) {
      case 0:
        t.dims[rng() % t.dims.size()] = Interesting(rng, 64);
        break;
      case 1:
        t.type = static_cast<gguf::TensorType>(Interesting(rng, 8) % 40);
        break;
      case 2:
        t.offset = Interesting(rng, data.size());
        break;
      case 3:
        t.name = f.tensors[rng() % f.tensors.size()].name;
        break;
      default:
        std::swap(t.dims[0], t.dims.back());
    }
  } else {
    gguf::Value& v = f.metadata[rng() % f.metadata.size()].second;
    switch (rng() % 4) {
      case 0:
        v.type = static_cast<gguf::ValueType>(rng() % 13);
        break;
      case 1:
        v.bits = Interesting(rng, 64);
        break;
      case 2:
        if (!v.strings.empty()) v.strings.resize(rng() % v.strings.size());
        if (!v.numbers.empty()) v.numbers.resize(rng() % v.numbers.size());
        break;
      default:
        f.metadata.erase(f.metadata.begin() + rng() % f.metadata.size());
    }
  }
  std::string out;
  f.EncodeTo(&out);
  return out + data;
}

std::string Mutate(const std::vector<std::string>& seeds,
                   std::mt19937_64& rng) {
  const std::string& seed = seeds[rng() % seeds.size()];
  std::string s = seed;
  // Most of the interest is in the header: its first few KB.
  const size_t header = std::min<size_t>(s.size(), 6000);
  switch (rng() % 8) {
    case 0:  // random bytes behind a valid preamble
      s = s.substr(0, 8 + rng() % 17);
      for (int n = rng() % 300; n > 0; --n)
        s.push_back(static_cast<char>(rng()));
      break;
    case 1:  // bit flips, mostly in the header
      for (int n = 1 + rng() % 4; n > 0; --n) {
        const size_t at = rng() % 4 ? rng() % header : rng() % s.size();
        s[at] ^= static_cast<char>(1 << (rng() % 8));
      }
      break;
    case 2:  // truncation
      s.resize(rng() % 2 ? rng() % header : rng() % (s.size() + 1));
      break;
    case 3: {  // splice: a prefix of one seed, a suffix of another
      const std::string& t = seeds[rng() % seeds.size()];
      s = s.substr(0, rng() % (s.size() + 1)) + t.substr(rng() % t.size());
      break;
    }
    case 4:    // a u64 (counts, lengths, dims, offsets) rewritten
    case 5: {  // or a u32 (versions, types, n_dims)
      const int width = rng() % 2 ? 8 : 4;
      const size_t at = rng() % (header - width);
      const uint64_t v = Interesting(rng, s.size());
      for (int i = 0; i < width; ++i)
        s[at + i] = static_cast<char>(v >> (8 * i));
      break;
    }
    case 6:  // a weight byte: NaN, infinity, a huge Q8_0 scale
      if (s.size() > header) {
        s[header + rng() % (s.size() - header)] =
            static_cast<char>(0x7f + rng() % 2);
      }
      break;
    default:
      s = EditHeader(seed, rng);
  }
  return s;
}

}  // namespace
}  // namespace kvcanary::engine

int main(int argc, char** argv) {
  using namespace kvcanary::engine;  // NOLINT: driver
  namespace fuzz = kvcanary::fuzz;
  const fuzz::SmokeArgs args = fuzz::ParseSmokeArgs(argc, argv);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::string> seeds = Seeds();
  if (!fuzz::RunFilesAndSeeds(args, seeds, ".gguf")) return 2;

  std::mt19937_64 rng(0x6767756600000001ULL);  // fixed: reproducible runs
  std::map<std::string, int> verdicts;
  for (int64_t i = 0; i < args.iterations; ++i) {
    const std::string input = Mutate(seeds, rng);
    fuzz::RunInput(input);
    absl::StatusOr<GgufModel> m = DecodeGgufModel(input, "fuzz", {});
    ++verdicts[m.ok() ? std::string("ok")
                      : fuzz::Category(m.status(), 72, true)];
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::printf(
      "gguf fuzz smoke: %lld mutated inputs, %zu seeds, %zu files, "
      "%.1f s\n",
      static_cast<long long>(args.iterations), seeds.size(), args.files.size(),
      seconds);
  fuzz::PrintVerdicts(verdicts);
  return 0;
}
