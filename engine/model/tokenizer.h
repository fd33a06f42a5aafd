// llama2.c-format BPE tokenizer (sentencepiece vocabulary exported by
// llama2.c's tokenizer.py).
//
// File format: int32 max_token_length, then for each of vocab_size tokens:
// f32 score, int32 length, `length` bytes of the piece. vocab_size is not in
// the file; it comes from the model config.
//
// Encoding follows llama2.c's run.c exactly: optional BOS (id 1), the
// sentencepiece dummy prefix (a space prepended to non-empty text), UTF-8
// code points looked up as pieces, byte fallback `<0xNN>` = id byte + 3 for
// code points not in the vocabulary, then repeated merging of the adjacent
// pair whose merged piece has the highest score (leftmost on ties), optional
// EOS (id 2).
#ifndef KVCANARY_ENGINE_MODEL_TOKENIZER_H_
#define KVCANARY_ENGINE_MODEL_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvcanary::engine {

inline constexpr int kBosToken = 1;
inline constexpr int kEosToken = 2;

// Immutable after construction; thread-safe for concurrent use.
class Tokenizer {
 public:
  // Errors name the file: kNotFound (cannot open), kDataLoss (truncated, a
  // negative or oversized length, trailing bytes), kInvalidArgument (bad
  // vocab_size).
  static absl::StatusOr<Tokenizer> Load(const std::string& path,
                                        int vocab_size);
  // A tokenizer for the embedded synthetic model (docs/model.md): ids 0..2
  // <unk>, "\n<s>\n", "\n</s>\n"; 3..258 the byte tokens; then printable
  // ASCII characters and the most common English pieces up to vocab_size,
  // with scores that make merges prefer longer pieces. Deterministic.
  // REQUIRES: vocab_size >= 354 (CHECKed).
  static Tokenizer Default(int vocab_size);
  // From pieces and scores directly (tests, Default()). kInvalidArgument
  // unless the sizes match and there are at least 259 pieces. Pieces are C
  // strings, as run.c sees them: bytes from an embedded NUL on are dropped.
  static absl::StatusOr<Tokenizer> FromPieces(std::vector<std::string> pieces,
                                              std::vector<float> scores);

  // Every byte of `text` is encoded, a NUL included (as the byte token
  // <0x00>, where run.c, taking a C string, would stop). Where " " is not a
  // piece, the dummy prefix is the byte token for ' ' (run.c's is
  // undefined there). Pieces repeated in the vocabulary resolve to the lowest
  // id (run.c's bsearch picks an unspecified one).
  std::vector<int> Encode(absl::string_view text, bool bos, bool eos) const;

  // The bytes token `token` prints as when it follows `prev_token`, as
  // run.c's decode(): a piece directly after BOS loses its leading space;
  // `<0xNN>` becomes that raw byte, except <0x00>, which is "" (an empty C
  // string in run.c). REQUIRES: 0 <= token < vocab_size() (CHECKed).
  std::string Decode(int prev_token, int token) const;
  // Decode() filtered as run.c's safe_printf(): a single-byte piece that is
  // neither printable nor whitespace in the C locale prints as nothing (so
  // byte tokens >= 0x80, e.g. byte-fallback UTF-8, print nothing).
  std::string DecodeForPrint(int prev_token, int token) const;
  // The printable text of a token sequence (prev = the token before
  // tokens[0], kBosToken at the start of a sequence).
  std::string DecodeAll(int prev_token, const std::vector<int>& tokens) const;

  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  // The longest piece in bytes: Encode(text) has at least
  // ceil(text.size() / max_token_length()) tokens (BOS aside), which bounds
  // a prompt's length before it is tokenized.
  int max_token_length() const { return max_token_length_; }
  const std::string& piece(int id) const { return pieces_[id]; }
  float score(int id) const { return scores_[id]; }

 private:
  Tokenizer() = default;
  // The id of `piece`, the lowest one if the vocabulary repeats it; -1 if
  // absent.
  int Lookup(absl::string_view piece) const;
  // Merges adjacent tokens in place as run.c's encode() does.
  void MergePairs(std::vector<int>& tokens) const;

  // Each piece as a C string: run.c sees nothing after an embedded NUL.
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  absl::flat_hash_map<std::string, int> piece_to_id_;
  // Longest piece in bytes; no concatenation longer than this is a piece.
  int max_token_length_ = 0;
  // Decode(prev, id) precomputed: [0] for prev != BOS, [1] for prev == BOS.
  std::vector<std::string> decoded_[2];
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_MODEL_TOKENIZER_H_
