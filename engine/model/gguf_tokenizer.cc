// A llama model's tokenizer in GGUF metadata: tokenizer.ggml.* read into a
// Tokenizer (checked against the engine's), and written from one.
#include "engine/model/gguf_tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"

namespace kvcanary::engine::gguf {
namespace {

constexpr absl::string_view kSentencePieceSpace = "\xe2\x96\x81";  // U+2581
// ggml's token types (tokenizer.ggml.token_type).
enum GgufTokenType : int32_t {
  kNormalToken = 1,
  kUnknownToken = 2,
  kControlToken = 3,
  kByteToken = 6,
};
constexpr int kFirstByteToken = 3;  // <0x00>; <0xFF> is 258

// A special token id that must be where the engine has it, if stated.
absl::Status CheckSpecialToken(const File& f, absl::string_view key, int want) {
  if (f.Find(key) == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(const uint64_t id, f.GetUint(key));
  if (id == static_cast<uint64_t>(want)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      key, " is ", id, "; the engine's tokenizer has it at ", want));
}

// The byte tokens <0x00>..<0xFF> must be at ids 3..258, where the engine's
// byte fallback looks for them (engine/model/tokenizer.h).
absl::Status CheckByteTokens(const std::vector<std::string>& tokens,
                             const std::vector<int64_t>& types) {
  for (int b = 0; b < 256; ++b) {
    const size_t id = kFirstByteToken + b;
    const std::string want = absl::StrFormat("<0x%02X>", b);
    if (id >= tokens.size() || tokens[id] != want ||
        (!types.empty() && types[id] != kByteToken)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer: token ", id, " is not the byte token ", want,
          " (the byte tokens must be <0x00>..<0xFF> at ids 3..258)"));
    }
  }
  return absl::OkStatus();
}

// A GGUF token as llama2.c's tokenizer export spells it (so tok512.bin is
// stories260K.gguf's tokenizer exactly): U+2581 as a space, and BOS and EOS
// as "\n<s>\n" and "\n</s>\n".
std::string PieceFromGguf(const std::string& token, int id) {
  if (id == kBosToken) return "\n<s>\n";
  if (id == kEosToken) return "\n</s>\n";
  return absl::StrReplaceAll(token, {{kSentencePieceSpace, " "}});
}

// The optional per-token arrays, each of `vocab` entries.
absl::Status ReadTokenArrays(const File& f, size_t vocab,
                             std::vector<float>* scores,
                             std::vector<int64_t>* types) {
  if (f.Find("tokenizer.ggml.scores") != nullptr) {
    ASSIGN_OR_RETURN(*scores, f.GetFloat32Array("tokenizer.ggml.scores"));
  } else {
    scores->assign(vocab, 0.0f);  // the spec: equal scores when absent
  }
  if (f.Find("tokenizer.ggml.token_type") != nullptr) {
    ASSIGN_OR_RETURN(*types, f.GetIntArray("tokenizer.ggml.token_type"));
  }
  if (scores->size() != vocab || (!types->empty() && types->size() != vocab)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: ", vocab, " tokens but ", scores->size(),
                     " scores and ", types->size(), " token types"));
  }
  return absl::OkStatus();
}

absl::Status CheckTokenizerKind(const File& f) {
  if (f.Find("tokenizer.ggml.model") != nullptr) {
    ASSIGN_OR_RETURN(const std::string kind,
                     f.GetString("tokenizer.ggml.model"));
    if (kind != "llama") {
      return absl::UnimplementedError(
          absl::StrCat("tokenizer.ggml.model '", kind,
                       "' is not supported (only llama's sentencepiece)"));
    }
  }
  if (f.Find("tokenizer.ggml.add_space_prefix") != nullptr) {
    ASSIGN_OR_RETURN(const bool prefix,
                     f.GetBool("tokenizer.ggml.add_space_prefix"));
    if (!prefix) {
      return absl::UnimplementedError(
          "tokenizer.ggml.add_space_prefix is false; the engine's encoder "
          "always adds the sentencepiece space prefix");
    }
  }
  RETURN_IF_ERROR(
      CheckSpecialToken(f, "tokenizer.ggml.bos_token_id", kBosToken));
  return CheckSpecialToken(f, "tokenizer.ggml.eos_token_id", kEosToken);
}

// The inverse of PieceFromGguf.
std::string PieceToGguf(const std::string& piece, int id) {
  if (id == kBosToken && piece == "\n<s>\n") return "<s>";
  if (id == kEosToken && piece == "\n</s>\n") return "</s>";
  return absl::StrReplaceAll(piece, {{" ", kSentencePieceSpace}});
}

int32_t TokenTypeOf(int id) {
  if (id == 0) return kUnknownToken;
  if (id == kBosToken || id == kEosToken) return kControlToken;
  if (id >= kFirstByteToken && id < kFirstByteToken + 256) return kByteToken;
  return kNormalToken;
}

}  // namespace

absl::StatusOr<std::optional<Tokenizer>> TokenizerFromMetadata(const File& f,
                                                               int vocab_size) {
  if (f.Find("tokenizer.ggml.tokens") == nullptr) return std::nullopt;
  RETURN_IF_ERROR(CheckTokenizerKind(f));
  ASSIGN_OR_RETURN(std::vector<std::string> tokens,
                   f.GetStringArray("tokenizer.ggml.tokens"));
  if (tokens.size() != static_cast<size_t>(vocab_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: ", tokens.size(),
                     " tokens, but the model's vocabulary is ", vocab_size));
  }
  std::vector<float> scores;
  std::vector<int64_t> types;
  RETURN_IF_ERROR(ReadTokenArrays(f, tokens.size(), &scores, &types));
  RETURN_IF_ERROR(CheckByteTokens(tokens, types));
  for (size_t id = 0; id < tokens.size(); ++id) {
    tokens[id] = PieceFromGguf(tokens[id], static_cast<int>(id));
  }
  absl::StatusOr<Tokenizer> tokenizer =
      Tokenizer::FromPieces(std::move(tokens), std::move(scores));
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: ", tokenizer.status().message()));
  }
  return std::optional<Tokenizer>(*std::move(tokenizer));
}

void AddTokenizer(const Tokenizer& tokenizer, File* f) {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int id = 0; id < tokenizer.vocab_size(); ++id) {
    tokens.push_back(PieceToGguf(tokenizer.piece(id), id));
    scores.push_back(tokenizer.score(id));
    types.push_back(TokenTypeOf(id));
  }
  f->metadata.insert(
      f->metadata.end(),
      {{"tokenizer.ggml.model", Value::String("llama")},
       {"tokenizer.ggml.tokens", Value::StringArray(std::move(tokens))},
       {"tokenizer.ggml.scores", Value::Float32Array(scores)},
       {"tokenizer.ggml.token_type", Value::Int32Array(types)},
       {"tokenizer.ggml.unknown_token_id", Value::Uint32(0)},
       {"tokenizer.ggml.bos_token_id", Value::Uint32(kBosToken)},
       {"tokenizer.ggml.eos_token_id", Value::Uint32(kEosToken)}});
}

}  // namespace kvcanary::engine::gguf
