#include "engine/nodes/serve.h"
#include "gtest/gtest.h"

namespace kvcanary::engine {
namespace {

TEST(ServedModelNameTest, TheModelFilesNameWithoutDirectoryOrExtension) {
  EXPECT_EQ(DefaultServedModelName("../shared/models/stories260K.bin"),
            "stories260K");
  EXPECT_EQ(DefaultServedModelName("/m/stories260K.gguf"), "stories260K");
  EXPECT_EQ(DefaultServedModelName("model"), "model");
  EXPECT_EQ(DefaultServedModelName("dir.d/llama.q8.gguf"), "llama.q8");
  EXPECT_EQ(DefaultServedModelName(".hidden"), ".hidden");
}

TEST(ServedModelNameTest, TheEmbeddedModelIsKvcanarySynthetic) {
  EXPECT_EQ(DefaultServedModelName(""), "kvcanary-synthetic");
}

}  // namespace
}  // namespace kvcanary::engine
