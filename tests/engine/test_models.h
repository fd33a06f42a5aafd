// Shared helpers for engine tests: the real stories260K model from
// ../shared/models (tests skip without it) and the embedded default.
#ifndef KVCANARY_TESTS_ENGINE_TEST_MODELS_H_
#define KVCANARY_TESTS_ENGINE_TEST_MODELS_H_

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "engine/model/model.h"
#include "engine/model/tokenizer.h"

namespace kvcanary::engine::testing {

inline std::string SharedDir() {
  const char* env = std::getenv("KVCANARY_SHARED_DIR");
  return env != nullptr ? env : KVCANARY_SHARED_DIR;
}

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

#define KVC_REQUIRE_STORIES260K(var)                       \
  const ::kvcanary::engine::testing::RealModel* var =      \
      ::kvcanary::engine::testing::Stories260K();          \
  if (var == nullptr)                                      \
  GTEST_SKIP() << "stories260K not found under "           \
               << ::kvcanary::engine::testing::SharedDir() \
               << "/models (set KVCANARY_SHARED_DIR); skipping"

}  // namespace kvcanary::engine::testing

#endif  // KVCANARY_TESTS_ENGINE_TEST_MODELS_H_
