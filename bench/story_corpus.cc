#include "bench/story_corpus.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "canaries/templates.h"
#include "common/check.h"
#include "common/file.h"
#include "engine/core/engine.h"
#include "engine/model/model.h"
#include "engine/model/tokenizer.h"

namespace kvcanary::bench {
namespace {

using engine::Engine;

constexpr int kBatch = 32;
constexpr int kMaxTokens = 256;

struct Loaded {
  engine::Model model;
  engine::Tokenizer tokenizer;
  uint64_t fingerprint;  // of the model's and tokenizer's bytes
};

uint64_t Fnv1a(absl::string_view bytes, uint64_t hash = 0xcbf29ce484222325) {
  for (char c : bytes) {
    hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3;
  }
  return hash;
}

// "" for a file that cannot be read (the hash then says "no such model").
std::string FileBytes(const std::string& path) {
  return ReadFile(path).value_or("");
}

// stories260K and tok512 from shared_dir/models, or the embedded default
// model with its tokenizer and a note saying why.
Loaded LoadModel(const std::string& shared_dir, StoryCorpus* corpus) {
  const std::string dir = shared_dir + "/models/";
  absl::StatusOr<engine::Model> model =
      engine::LoadLlama2cModel(dir + "stories260K.bin");
  if (model.ok()) {
    absl::StatusOr<engine::Tokenizer> tokenizer =
        engine::Tokenizer::Load(dir + "tok512.bin", model->config.vocab_size);
    if (tokenizer.ok()) {
      corpus->model = "stories260K";
      const uint64_t fingerprint =
          Fnv1a(FileBytes(dir + "tok512.bin"),
                Fnv1a(FileBytes(dir + "stories260K.bin")));
      return Loaded{*std::move(model), *std::move(tokenizer), fingerprint};
    }
    corpus->note = tokenizer.status().ToString();
  } else {
    corpus->note = model.status().ToString();
  }
  corpus->model = "the embedded default model (random weights)";
  engine::Model fallback = engine::DefaultModel();
  engine::Tokenizer tokenizer =
      engine::Tokenizer::Default(fallback.config.vocab_size);
  return Loaded{std::move(fallback), std::move(tokenizer),
                Fnv1a("the embedded default model")};
}

// Prompt i of the corpus: the sniff and golden prompts in turn.
std::string PromptOf(uint64_t i) {
  return i % 2 == 0 ? canaries::SniffPrompt(i / 2 % 8)
                    : canaries::GoldenPrompt(i / 2 % 8);
}

// Generates completions first..first + kBatch - 1 into `corpus`.
void GenerateBatch(const Loaded& loaded, Engine* engine, uint64_t first,
                   StoryCorpus* corpus) {
  std::vector<RequestId> ids;
  for (uint64_t i = first; i < first + kBatch; ++i) {
    engine::SamplingParams sampling;
    sampling.temperature = 1.0f;
    sampling.top_p = 0.9f;
    sampling.seed = i + 1;
    sampling.max_tokens = kMaxTokens;
    absl::StatusOr<RequestId> id = engine->Submit(
        TenantId(1), loaded.tokenizer.Encode(PromptOf(i), true, false),
        sampling);
    CHECK(id.ok()) << id.status();
    ids.push_back(*id);
  }
  engine->RunUntilIdle();
  for (RequestId id : ids) {
    const engine::Sequence& seq = *engine->Get(id);
    std::string text =
        loaded.tokenizer.DecodeAll(seq.prompt.back(), seq.output);
    corpus->bytes += text.size();
    corpus->completions.push_back(std::move(text));
    engine->Release(id);
  }
}

// The cache file of a corpus: its name from the model's fingerprint and
// the generation parameters.
std::string CachePath(const StoryCorpusOptions& options, uint64_t fingerprint) {
  const std::string parameters =
      "v1 prompts=sniff,golden temperature=1 top_p=0.9 max_tokens=" +
      std::to_string(kMaxTokens) + " bytes=" + std::to_string(options.bytes);
  char name[64];
  std::snprintf(
      name, sizeof(name), "/kvcanary-bench-corpus-%016llx.txt",
      static_cast<unsigned long long>(Fnv1a(parameters, fingerprint)));
  return options.cache_dir + name;
}

constexpr absl::string_view kCacheHeader = "kvcanary-bench-corpus v1";

// Reads a corpus written by WriteCache; false if there is none or it is
// cut short or malformed.
bool ReadCache(const std::string& path, StoryCorpus* corpus) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return false;
  std::istringstream in(*std::move(bytes));
  std::string line;
  if (!std::getline(in, line) || !absl::StartsWith(line, kCacheHeader))
    return false;
  const size_t count =
      std::strtoull(line.c_str() + kCacheHeader.size(), nullptr, 10);
  std::vector<std::string> completions(count);
  for (std::string& c : completions) {
    if (!std::getline(in, line)) return false;
    c.resize(std::strtoull(line.c_str(), nullptr, 10));
    if (!in.read(c.data(), c.size()) || in.get() != '\n') return false;
  }
  if (count == 0 || in.peek() != std::char_traits<char>::eof()) return false;
  for (const std::string& c : completions) corpus->bytes += c.size();
  corpus->completions = std::move(completions);
  return true;
}

// Best effort: false if the corpus could not be kept (it is generated
// again next run).
bool WriteCache(const std::string& path, const StoryCorpus& corpus) {
  std::string out =
      absl::StrCat(kCacheHeader, " ", corpus.completions.size(), "\n");
  for (const std::string& c : corpus.completions) {
    absl::StrAppend(&out, c.size(), "\n", c, "\n");
  }
  return WriteFileAtomically(path, out, 0644).ok();
}

}  // namespace

StoryCorpus GenerateStoryCorpus(const StoryCorpusOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  StoryCorpus corpus;
  const Loaded loaded = LoadModel(options.shared_dir, &corpus);
  if (!options.cache_dir.empty()) {
    corpus.cache_path = CachePath(options, loaded.fingerprint);
    if (!options.regenerate && ReadCache(corpus.cache_path, &corpus)) {
      return corpus;
    }
  }
  engine::EngineOptions engine_options;
  engine_options.num_threads = options.threads;
  engine_options.scheduler.max_batch_seqs = kBatch;
  Engine engine(&loaded.model, engine_options);
  for (uint64_t first = 0; corpus.bytes < options.bytes; first += kBatch) {
    GenerateBatch(loaded, &engine, first, &corpus);
  }
  corpus.generate_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  if (!corpus.cache_path.empty() && !WriteCache(corpus.cache_path, corpus)) {
    corpus.cache_path.clear();
  }
  return corpus;
}

}  // namespace kvcanary::bench
