// Shared helpers for engine tests: the real stories260K model from
// ../shared/models (tests skip without it, and fail under CI:
// tests/shared_files.h) and the embedded default.
#ifndef KVCANARY_TESTS_ENGINE_TEST_MODELS_H_
#define KVCANARY_TESTS_ENGINE_TEST_MODELS_H_

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/model/tokenizer.h"
#include "tests/shared_files.h"

namespace kvcanary::engine::testing {

inline std::string SharedDir() { return shared_files::Dir(); }

inline std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct RealModel {
  Model model;
  Tokenizer tokenizer;
};

// Loads stories260K + tok512 once per process; nullopt if absent.
inline const RealModel* Stories260K() {
  static const std::optional<RealModel>* loaded = [] {
    auto* r = new std::optional<RealModel>();
    const std::string dir = SharedDir() + "/models/";
    auto model = LoadLlama2cModel(dir + "stories260K.bin");
    if (!model.ok()) return r;
    auto tok = Tokenizer::Load(dir + "tok512.bin", model->config.vocab_size);
    if (!tok.ok()) return r;
    r->emplace(RealModel{*std::move(model), *std::move(tok)});
    return r;
  }();
  return loaded->has_value() ? &**loaded : nullptr;
}

// Skips the test without stories260K + tok512 (fails it under CI, and
// wherever they are present but do not load); else `var` points at them.
#define KVC_REQUIRE_STORIES260K(var)                                 \
  KVC_REQUIRE_SHARED("models/stories260K.bin", "models/tok512.bin"); \
  const ::kvcanary::engine::testing::RealModel* var =                \
      ::kvcanary::engine::testing::Stories260K();                    \
  ASSERT_NE(var, nullptr) << "stories260K is under "                 \
                          << ::kvcanary::shared_files::Dir()         \
                          << "/models but does not load"

// Eight story openings for stories260K: the batch-invariance and numerics
// tests' prompts.
inline const std::vector<std::string>& EightPrompts() {
  static const auto* p = new std::vector<std::string>{
      "Once upon a time",     "The little dog",
      "Lily and Ben went to", "One day, a big red ball",
      "Tom was sad because",  "The sun was shining and",
      "A girl named Sue had", "There was a cat who liked"};
  return *p;
}

// Token prompts of 1 to 20 tokens (BOS first, the rest spread over the
// vocabulary): batches mixing prefills of several lengths with decodes, for
// the batch-invariance tests.
inline std::vector<std::vector<int>> TokenPrompts(int count, int vocab) {
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < count; ++i) {
    std::vector<int> p = {1};
    for (int t = 1; t < 1 + (i * 7) % 20; ++t)
      p.push_back(3 + (t * 31 + i * 17) % (vocab - 3));
    prompts.push_back(p);
  }
  return prompts;
}

}  // namespace kvcanary::engine::testing

#endif  // KVCANARY_TESTS_ENGINE_TEST_MODELS_H_
