// No silent truncation: every character U+0000..U+00FF inside a JSON
// prompt reaches the tokenizer (a NUL as the byte token <0x00>, never the
// end of the prompt), so usage.prompt_tokens is the tokenizer's own count;
// raw invalid UTF-8 in the body is refused, not guessed at.
#include <string>

#include "engine/model/model.h"
#include "engine/model/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

// Code point `c` (< 0x100) as UTF-8.
std::string Utf8(int c) {
  if (c < 0x80) return std::string(1, static_cast<char>(c));
  return {static_cast<char>(0xC0 | (c >> 6)),
          static_cast<char>(0x80 | (c & 0x3F))};
}

int TokenizerCount(const std::string& text) {
  const engine::Tokenizer t =
      engine::Tokenizer::Default(engine::DefaultModelConfig().vocab_size);
  return static_cast<int>(t.Encode(text, /*bos=*/true, /*eos=*/false).size());
}

class PromptBytesTest : public SharedClusterTest {};

TEST_F(PromptBytesTest, EveryLatin1CharacterIsCountedNoneCutAtANul) {
  // Each character between two words, then all of them in one prompt.
  for (int c = 0; c < 256; ++c) {
    const std::string text = "word " + Utf8(c) + " end";
    const nlohmann::json body = {{"prompt", text}, {"max_tokens", 1}};
    HttpResult r =
        Post(cluster_->router(), "/v1/completions", body.dump(), "sk-acme");
    ASSERT_EQ(r.status, 200) << "U+" << c << " " << r.body;
    EXPECT_EQ(r.json["usage"]["prompt_tokens"], TokenizerCount(text))
        << "U+" << c;
  }
  // In runs of 64 (a whole run past U+0080 is over the prompt limit: two
  // byte tokens a character).
  for (int first = 0; first < 256; first += 64) {
    std::string text;
    for (int c = first; c < first + 64; ++c) text += Utf8(c);
    const nlohmann::json body = {{"prompt", text}, {"max_tokens", 1}};
    // nlohmann escapes control characters as \u00XX, as clients send them.
    if (first == 0) {
      ASSERT_NE(body.dump().find("\\u0000"), std::string::npos);
    }
    HttpResult r =
        Post(cluster_->router(), "/v1/completions", body.dump(), "sk-acme");
    ASSERT_EQ(r.status, 200) << "from U+" << first << " " << r.body;
    EXPECT_EQ(r.json["usage"]["prompt_tokens"], TokenizerCount(text))
        << "from U+" << first;
    // Cut at a leading NUL, it would have counted 1 (BOS).
    EXPECT_GT(r.json["usage"]["prompt_tokens"].get<int>(), 60);
  }
}

TEST_F(PromptBytesTest, RawInvalidUtf8InTheBodyIs400) {
  const std::string body =
      std::string("{\"prompt\": \"bad \xC3\x28 byte\", \"max_tokens\": 1}");
  HttpResult r = Post(cluster_->router(), "/v1/completions", body, "sk-acme");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_TRUE(r.json.contains("error")) << r.body;
}

}  // namespace
}  // namespace kvcanary::testing
