// Real model output for the scanner's benchmark: completions of
// stories260K (../shared/models) generated in this process with the
// engine, as the auditor's probes get them back. Where the model folder is
// absent, the embedded default model stands in (its text is noise, so the
// figures are not the scanner's on stories; the caller prints why).
#ifndef KVCANARY_BENCH_STORY_CORPUS_H_
#define KVCANARY_BENCH_STORY_CORPUS_H_

#include <cstddef>
#include <string>
#include <vector>

namespace kvcanary::bench {

struct StoryCorpus {
  std::string model;  // "stories260K" or the stand-in's name
  std::string note;   // why the stand-in, or ""
  std::vector<std::string> completions;
  size_t bytes = 0;        // all completions together
  double generate_s = 0;   // 0 when read from the cache
  std::string cache_path;  // where it was read from or kept; "" if not kept
};

struct StoryCorpusOptions {
  std::string shared_dir = "../shared";  // holds models/stories260K.bin
  size_t bytes = 4'000'000;              // at least this much text
  int threads = 1;                       // the engine thread included
  // Generating 4 MB takes minutes on two cores (the model's own cost), so
  // a corpus is kept in cache_dir under a name from a hash of the model's
  // and tokenizer's bytes and of these parameters, and read back by later
  // runs; "" or regenerate = true generates it anew.
  std::string cache_dir = "/tmp";
  bool regenerate = false;
};

// Completions of the auditor's sniff and golden prompts (canaries/
// templates.h: variant i / 2 % 8 of each in turn) at temperature 1, top-p
// 0.9, seed i + 1, up to 256 tokens each, in batches of 32, until they
// hold at least `bytes` bytes: the sampling docs/canaries.md measured
// false positives on. Deterministic for a model.
StoryCorpus GenerateStoryCorpus(const StoryCorpusOptions& options);

}  // namespace kvcanary::bench

#endif  // KVCANARY_BENCH_STORY_CORPUS_H_
