#include "engine/model/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/shared_files.h"

namespace kvcanary::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string SharedPath(absl::string_view relative) {
  return shared_files::Path(std::string(relative));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

template <typename T>
void AppendRaw(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

// The llama2.c tokenizer file format, written independently of Load().
std::string SerializeTokenizer(const Tokenizer& t) {
  std::string out;
  AppendRaw<int32_t>(out, 16);
  for (int id = 0; id < t.vocab_size(); ++id) {
    AppendRaw<float>(out, t.score(id));
    AppendRaw<int32_t>(out, static_cast<int32_t>(t.piece(id).size()));
    out += t.piece(id);
  }
  return out;
}

// Decode() of every token after the leading BOS, unfiltered: the exact bytes.
std::string DecodeRaw(const Tokenizer& t, const std::vector<int>& tokens) {
  std::string text;
  for (size_t i = 1; i < tokens.size(); ++i) {
    text += t.Decode(tokens[i - 1], tokens[i]);
  }
  return text;
}

std::vector<int> AfterBos(const std::vector<int>& tokens) {
  return std::vector<int>(tokens.begin() + 1, tokens.end());
}

int NaiveLookup(const Tokenizer& t, const std::string& piece) {
  for (int id = 0; id < t.vocab_size(); ++id) {
    if (t.piece(id) == piece) return id;
  }
  return -1;
}

// A line-by-line transcription of run.c's encode(): linear lookups and a
// full rescan of all pairs after every merge. The oracle for Encode().
std::vector<int> ReferenceEncode(const Tokenizer& t, const std::string& text,
                                 bool bos, bool eos) {
  std::vector<int> tokens;
  if (bos) tokens.push_back(1);
  if (!text.empty()) tokens.push_back(NaiveLookup(t, " "));
  std::string group;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((text[i] & 0xC0) != 0x80) group.clear();
    group += text[i];
    if (i + 1 < text.size() && (text[i + 1] & 0xC0) == 0x80 &&
        group.size() < 4) {
      continue;
    }
    const int id = NaiveLookup(t, group);
    if (id != -1) {
      tokens.push_back(id);
    } else {
      for (unsigned char c : group) tokens.push_back(c + 3);
    }
    group.clear();
  }
  while (true) {
    float best_score = -1e10;
    int best_id = -1;
    int best_idx = -1;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      const int id =
          NaiveLookup(t, t.piece(tokens[i]) + t.piece(tokens[i + 1]));
      if (id != -1 && t.score(id) > best_score) {
        best_score = t.score(id);
        best_id = id;
        best_idx = static_cast<int>(i);
      }
    }
    if (best_idx == -1) break;
    tokens[best_idx] = best_id;
    tokens.erase(tokens.begin() + best_idx + 1);
  }
  if (eos) tokens.push_back(2);
  return tokens;
}

// Specials and byte tokens, then `extra` pieces with `extra_scores`.
Tokenizer SmallTokenizer(const std::vector<std::string>& extra,
                         const std::vector<float>& extra_scores) {
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    pieces.push_back(name);
  }
  std::vector<float> scores(pieces.size(), 0.0f);
  pieces.insert(pieces.end(), extra.begin(), extra.end());
  scores.insert(scores.end(), extra_scores.begin(), extra_scores.end());
  absl::StatusOr<Tokenizer> t = Tokenizer::FromPieces(pieces, scores);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

const char* const kAsciiText =
    "Once upon a time, there was a little girl named Lily. She loved to play "
    "outside in the park! \"Why?\" she asked; 42 + 7 = 49 ~ {ok} [done]";
const char* const kNewlineText = "Line one.\nLine two.\n\nLast line\tend\n";
const char* const kUtf8Text = "héllo wörld ☃ 日本語 😀";

class TokenizerTok512Test : public ::testing::Test {
 protected:
  void SetUp() override {
    KVC_REQUIRE_SHARED("models/tok512.bin");
    const std::string path = SharedPath("models/tok512.bin");
    absl::StatusOr<Tokenizer> t = Tokenizer::Load(path, 512);
    ASSERT_TRUE(t.ok()) << t.status();
    tok_.emplace(*std::move(t));
  }
  const Tokenizer& tok() const { return *tok_; }

 private:
  std::optional<Tokenizer> tok_;
};

TEST_F(TokenizerTok512Test, EncodesOnceUponATimeAsReference) {
  EXPECT_THAT(tok().Encode("Once upon a time", true, false),
              ElementsAre(1, 403, 407, 261, 378));
  EXPECT_THAT(tok().Encode("Once upon a time", true, true),
              ElementsAre(1, 403, 407, 261, 378, 2));
}

TEST_F(TokenizerTok512Test, EmptyTextIsOnlyBosAndEos) {
  EXPECT_THAT(tok().Encode("", true, false), ElementsAre(1));
  EXPECT_THAT(tok().Encode("", true, true), ElementsAre(1, 2));
  EXPECT_TRUE(tok().Encode("", false, false).empty());
}

TEST_F(TokenizerTok512Test, RoundTripsAsciiText) {
  const std::vector<int> tokens = tok().Encode(kAsciiText, true, false);
  EXPECT_LT(tokens.size(), std::strlen(kAsciiText));
  EXPECT_EQ(tok().DecodeAll(kBosToken, AfterBos(tokens)), kAsciiText);
}

TEST_F(TokenizerTok512Test, RoundTripsTextWithNewlines) {
  const std::vector<int> tokens = tok().Encode(kNewlineText, true, false);
  EXPECT_EQ(tok().DecodeAll(kBosToken, AfterBos(tokens)), kNewlineText);
}

TEST_F(TokenizerTok512Test, RoundTripsUtf8ThroughByteFallback) {
  const std::vector<int> tokens = tok().Encode(kUtf8Text, true, false);
  const int byte_tokens = std::count_if(
      tokens.begin(), tokens.end(), [](int id) { return id >= 3 && id < 259; });
  EXPECT_GT(byte_tokens, 0);
  EXPECT_EQ(DecodeRaw(tok(), tokens), kUtf8Text);
}

// run.c's safe_printf() drops a lone byte that is neither printable nor space
// in the C locale, so byte-fallback UTF-8 does not survive printing.
TEST_F(TokenizerTok512Test, PrintDropsNonAsciiByteTokensLikeSafePrintf) {
  // "é" is a piece of its own and prints; "ö" and "☃" are byte tokens.
  const std::vector<int> tokens = tok().Encode("héllo wörld ☃", true, false);
  EXPECT_EQ(tok().DecodeAll(kBosToken, AfterBos(tokens)), "héllo wrld ");
}

TEST_F(TokenizerTok512Test, GoldenIdsDecodeToGoldenText) {
  KVC_REQUIRE_SHARED(
      "golden/stories260K_t0_n256_prompt_Once_upon_a_time.ids.txt",
      "golden/stories260K_t0_n256_prompt_Once_upon_a_time.txt");
  const std::string ids_text = ReadFile(
      SharedPath("golden/stories260K_t0_n256_prompt_Once_upon_a_time.ids.txt"));
  const std::string golden = ReadFile(
      SharedPath("golden/stories260K_t0_n256_prompt_Once_upon_a_time.txt"));
  std::vector<int> ids;
  for (absl::string_view line : absl::StrSplit(ids_text, '\n')) {
    if (!absl::ConsumePrefix(&line, "sequence:")) continue;
    for (absl::string_view field :
         absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      ids.push_back(std::stoi(std::string(field)));
    }
  }
  ASSERT_GT(ids.size(), 5u);
  ASSERT_EQ(ids[0], kBosToken);
  EXPECT_EQ(std::vector<int>(ids.begin(), ids.begin() + 5),
            tok().Encode("Once upon a time", true, false));
  EXPECT_EQ(tok().DecodeAll(kBosToken, AfterBos(ids)) + "\n", golden);
}

TEST_F(TokenizerTok512Test, MatchesReferenceEncoder) {
  for (const char* text : {kAsciiText, kNewlineText, kUtf8Text, "  a  b ",
                           "\x80\x80 stray\xC3", "\xF0\x9F\x98\x80\x80\x80x"}) {
    EXPECT_EQ(tok().Encode(text, true, true),
              ReferenceEncode(tok(), text, true, true))
        << text;
  }
}

TEST_F(TokenizerTok512Test, RoundTripsArbitraryBytes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text(rng() % 40 + 1, ' ');
    for (char& c : text) c = static_cast<char>(rng() % 255 + 1);
    EXPECT_EQ(DecodeRaw(tok(), tok().Encode(text, true, false)), text);
  }
}

TEST(TokenizerTest, MatchesReferenceEncoderOnRandomVocabularies) {
  std::mt19937 rng(1234);
  const std::vector<std::string> alphabet = {
      "a", "b", " ", "\xC3\xA9", "\x80", "\xF0\x9F\x98\x80"};
  const float specials[] = {-1e10f, -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), -0.0f};
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::string> extra = {"a", "b", " "};
    std::vector<float> scores = {-1, -2, -3};
    for (int i = 0; i < 30; ++i) {
      std::string piece;
      for (int n = rng() % 3 + 2; n > 0; --n) piece += alphabet[rng() % 6];
      extra.push_back(piece);  // Duplicates allowed: the lowest id wins.
      scores.push_back(rng() % 8 == 0 ? specials[rng() % 4]
                                      : static_cast<float>(rng() % 5));
    }
    const Tokenizer t = SmallTokenizer(extra, scores);
    std::string text;
    for (int n = rng() % 12; n > 0; --n) text += alphabet[rng() % 6];
    const bool bos = rng() % 2;
    ASSERT_EQ(t.Encode(text, bos, false), ReferenceEncode(t, text, bos, false))
        << "trial " << trial << " text '" << text << "'";
  }
}

TEST(TokenizerTest, BosTakesPartInMergesLikeRunC) {
  const Tokenizer t = SmallTokenizer({" ", "a", "\n<s>\n "}, {0, 0, 5});
  EXPECT_THAT(t.Encode("a", true, false), ElementsAre(261, 260));
}

TEST(TokenizerTest, DummyPrefixFallsBackToSpaceByteWithoutSpacePiece) {
  const Tokenizer t = SmallTokenizer({"a", "b", "ab"}, {0, 0, 1});
  EXPECT_THAT(t.Encode("ab", false, false), ElementsAre(' ' + 3, 261));
}

// A NUL is a byte token, never the end of the text: a prompt is not cut.
TEST(TokenizerTest, NulIsTheByteTokenNeverTheEndOfTheText) {
  const Tokenizer t = Tokenizer::Default(512);
  const std::vector<int> with_nul =
      t.Encode(std::string("ab\0cd", 5), true, false);
  EXPECT_THAT(with_nul, ::testing::Contains(0 + 3));  // <0x00>
  EXPECT_GT(with_nul.size(), t.Encode("ab", true, false).size());
  EXPECT_EQ(t.Encode(std::string("\0x", 2), true, false).size(),
            t.Encode("x", true, false).size() + 1);
}

// Every code point U+0000..U+00FF, alone, encodes to tokens after BOS, and
// in one text nothing after the NUL is dropped.
TEST(TokenizerTest, EveryLatin1CharacterIsEncoded) {
  const Tokenizer t = Tokenizer::Default(512);
  std::string all;
  for (int c = 0; c < 256; ++c) {
    std::string utf8;
    if (c < 0x80) {
      utf8 = std::string(1, static_cast<char>(c));
    } else {
      utf8 = {static_cast<char>(0xC0 | (c >> 6)),
              static_cast<char>(0x80 | (c & 0x3F))};
    }
    // BOS, then the dummy-prefix space and the character (merged or not).
    EXPECT_GE(t.Encode(utf8, true, false).size(), 2u) << "U+" << c;
    all += utf8;
  }
  // The NUL at the start is there, and so is everything after it.
  const std::vector<int> ids = t.Encode(all, true, false);
  EXPECT_THAT(ids, ::testing::Contains(0 + 3));  // <0x00>
  EXPECT_GT(ids.size(), t.Encode(all.substr(128), true, false).size());
}

TEST(TokenizerTest, DecodesByteTokensAndStripsSpaceOnlyAfterBos) {
  const Tokenizer t = SmallTokenizer({" hi", "\x01"}, {0, 0});
  EXPECT_EQ(t.Decode(kBosToken, 259), "hi");
  EXPECT_EQ(t.Decode(5, 259), " hi");
  EXPECT_EQ(t.Decode(5, 'A' + 3), "A");
  EXPECT_EQ(t.Decode(5, 0xC3 + 3), "\xC3");
  EXPECT_EQ(t.Decode(5, 3), "");  // <0x00> is an empty C string in run.c.
  EXPECT_EQ(t.DecodeForPrint(5, 0x07 + 3), "");
  EXPECT_EQ(t.DecodeForPrint(5, 0xC3 + 3), "");
  EXPECT_EQ(t.DecodeForPrint(5, '\n' + 3), "\n");
  EXPECT_EQ(t.DecodeForPrint(5, 260), "");  // A raw control-byte piece.
  EXPECT_EQ(t.DecodeAll(kBosToken, {259, 'A' + 3, 0x07 + 3}), "hiA");
}

TEST(TokenizerTest, FromPiecesRejectsBadSizes) {
  EXPECT_EQ(Tokenizer::FromPieces({"a"}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::FromPieces({"a"}, {0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class TokenizerLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/tokenizer_load_test_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() +
            ".bin";
    valid_ = SerializeTokenizer(Tokenizer::Default(400));
  }
  // Writes `bytes` to the temp file, loads it as a 400-token vocabulary and
  // expects `code` with a message naming the file and mentioning `why`.
  void ExpectLoadError(const std::string& bytes, absl::StatusCode code,
                       absl::string_view why) {
    WriteFile(path_, bytes);
    absl::StatusOr<Tokenizer> t = Tokenizer::Load(path_, 400);
    EXPECT_EQ(t.status().code(), code) << t.status();
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(path_));
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(why));
  }
  void SetFirstLength(int32_t length) {
    std::memcpy(valid_.data() + 8, &length, sizeof(length));
  }

  std::string path_;
  std::string valid_;
};

TEST_F(TokenizerLoadTest, LoadsWhatWasWritten) {
  WriteFile(path_, valid_);
  absl::StatusOr<Tokenizer> t = Tokenizer::Load(path_, 400);
  ASSERT_TRUE(t.ok()) << t.status();
  const Tokenizer expected = Tokenizer::Default(400);
  for (int id = 0; id < 400; ++id) {
    EXPECT_EQ(t->piece(id), expected.piece(id));
    EXPECT_EQ(t->score(id), expected.score(id));
  }
}

TEST_F(TokenizerLoadTest, MissingFileIsNotFound) {
  absl::StatusOr<Tokenizer> t = Tokenizer::Load(path_ + ".missing", 400);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(path_ + ".missing"));
}

TEST_F(TokenizerLoadTest, TruncatedHeaderIsDataLoss) {
  ExpectLoadError(valid_.substr(0, 2), absl::StatusCode::kDataLoss,
                  "max_token_length");
}

TEST_F(TokenizerLoadTest, TruncatedMidEntryIsDataLoss) {
  ExpectLoadError(valid_.substr(0, valid_.size() - 3),
                  absl::StatusCode::kDataLoss, "token 399");
  ExpectLoadError(valid_.substr(0, 4 + 6), absl::StatusCode::kDataLoss,
                  "token 0 of 400 length");
}

TEST_F(TokenizerLoadTest, NegativeLengthIsDataLoss) {
  SetFirstLength(-5);
  ExpectLoadError(valid_, absl::StatusCode::kDataLoss, "length -5");
}

TEST_F(TokenizerLoadTest, ZeroLengthIsDataLoss) {
  SetFirstLength(0);
  ExpectLoadError(valid_, absl::StatusCode::kDataLoss, "length 0");
}

TEST_F(TokenizerLoadTest, LengthBeyondEndOfFileIsDataLoss) {
  SetFirstLength(1 << 30);
  ExpectLoadError(valid_, absl::StatusCode::kDataLoss, "beyond the end");
}

TEST_F(TokenizerLoadTest, TrailingBytesAreDataLoss) {
  ExpectLoadError(valid_ + "x", absl::StatusCode::kDataLoss, "trailing");
}

TEST_F(TokenizerLoadTest, SmallVocabSizeIsInvalidArgument) {
  WriteFile(path_, valid_);
  absl::StatusOr<Tokenizer> t = Tokenizer::Load(path_, 10);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(path_));
}

TEST_F(TokenizerLoadTest, RandomCorruptionNeverCrashes) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 300; ++trial) {
    std::string bytes = valid_.substr(0, rng() % valid_.size());
    for (int n = rng() % 8; n > 0 && !bytes.empty(); --n) {
      bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    WriteFile(path_, bytes);
    absl::StatusOr<Tokenizer> t = Tokenizer::Load(path_, 400);
    if (!t.ok()) {
      EXPECT_THAT(std::string(t.status().message()), HasSubstr(path_));
    }
  }
}

TEST(TokenizerDefaultTest, HasSpecialByteAndAsciiPieces) {
  const Tokenizer t = Tokenizer::Default(512);
  ASSERT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.piece(0), "<unk>");
  EXPECT_EQ(t.piece(1), "\n<s>\n");
  EXPECT_EQ(t.piece(2), "\n</s>\n");
  EXPECT_EQ(t.piece(3), "<0x00>");
  EXPECT_EQ(t.piece(258), "<0xFF>");
  EXPECT_EQ(t.piece(259), " ");
  EXPECT_EQ(t.piece(353), "~");
}

TEST(TokenizerDefaultTest, LongerPiecesScoreHigher) {
  const Tokenizer t = Tokenizer::Default(512);
  for (int a = 259; a < 512; ++a) {
    for (int b = 259; b < 512; ++b) {
      if (t.piece(a).size() > t.piece(b).size()) {
        ASSERT_GT(t.score(a), t.score(b)) << a << " vs " << b;
      }
    }
  }
}

TEST(TokenizerDefaultTest, MergesCommonWords) {
  const Tokenizer t = Tokenizer::Default(512);
  EXPECT_LT(t.Encode(" the", false, false).size(), 4u);
  const std::vector<int> the = t.Encode("the", false, false);
  ASSERT_EQ(the.size(), 1u);
  EXPECT_EQ(t.piece(the[0]), " the");
}

TEST(TokenizerDefaultTest, RoundTripsAsciiAndUtf8Text) {
  const Tokenizer t = Tokenizer::Default(512);
  for (const char* text : {kAsciiText, kNewlineText}) {
    const std::vector<int> tokens = t.Encode(text, true, false);
    EXPECT_EQ(t.DecodeAll(kBosToken, AfterBos(tokens)), text);
    EXPECT_EQ(tokens, ReferenceEncode(t, text, true, false));
  }
  EXPECT_EQ(DecodeRaw(t, t.Encode(kUtf8Text, true, false)), kUtf8Text);
}

TEST(TokenizerDefaultTest, IsDeterministic) {
  const Tokenizer a = Tokenizer::Default(512);
  const Tokenizer b = Tokenizer::Default(512);
  for (int id = 0; id < 512; ++id) {
    EXPECT_EQ(a.piece(id), b.piece(id));
    EXPECT_EQ(a.score(id), b.score(id));
  }
  EXPECT_EQ(a.Encode(kAsciiText, true, true), b.Encode(kAsciiText, true, true));
}

TEST(TokenizerDefaultTest, FillsLargeVocabularyWithUniquePieces) {
  const Tokenizer t = Tokenizer::Default(32000);
  std::set<std::string> unique;
  for (int id = 0; id < t.vocab_size(); ++id) unique.insert(t.piece(id));
  EXPECT_EQ(t.vocab_size(), 32000);
  EXPECT_EQ(unique.size(), 32000u);
  EXPECT_EQ(DecodeRaw(t, t.Encode(kAsciiText, true, false)), kAsciiText);
}

}  // namespace
}  // namespace kvcanary::engine
