#include "engine/model/tokenizer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/check.h"
#include "common/status_macros.h"

namespace kvcanary::engine {
namespace {

// Ids 3..258 are the byte tokens <0x00>..<0xFF> (after <unk>, <s>, </s>).
constexpr int kByteTokenOffset = 3;
constexpr int kMinVocabSize = kByteTokenOffset + 256;
// run.c starts its best-merge search at this score and compares with a strict
// `>`: a merge scoring at or below it, or NaN, is never taken.
constexpr float kMinMergeScore = -1e10f;
// Longest UTF-8 sequence run.c groups into one lookup.
constexpr int kMaxCodepointBytes = 4;

// isprint() || isspace() in the C locale, which run.c runs in (it never calls
// setlocale): bytes >= 0x80 are neither.
bool IsPrintOrSpace(unsigned char c) {
  return (c >= 0x20 && c <= 0x7e) || (c >= 0x09 && c <= 0x0d);
}

bool IsUtf8Continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// run.c's decode() of `piece` (already stripped of the space after BOS): a
// piece that sscanf matches as "<0x%02hhX>" becomes that byte as a C string,
// so <0x00> becomes "". sscanf itself is used so that its leniency (leading
// whitespace, a sign, one hex digit, no closing '>') is reproduced exactly.
std::string DecodePiece(const std::string& piece) {
  unsigned char byte_val = 0;
  if (std::sscanf(piece.c_str(), "<0x%02hhX>", &byte_val) == 1) {
    return byte_val == 0 ? std::string() : std::string(1, char(byte_val));
  }
  return piece;
}

// Reads the llama2.c tokenizer file `path` sequentially; every read is bounded
// by the file's size, so no length in the file can cause a large allocation.
class TokenizerFileReader {
 public:
  static absl::StatusOr<TokenizerFileReader> Open(const std::string& path) {
    std::FILE* file = std::fopen(path.c_str(), "rb");
    if (file == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "cannot open tokenizer file ", path, ": ", std::strerror(errno)));
    }
    TokenizerFileReader reader(path, file);
    struct stat st;
    if (fstat(fileno(file), &st) != 0 || !S_ISREG(st.st_mode)) {
      return absl::NotFoundError(
          absl::StrCat("tokenizer file ", path, " is not a regular file"));
    }
    reader.size_bytes_ = static_cast<uint64_t>(st.st_size);
    return reader;
  }

  uint64_t remaining_bytes() const { return size_bytes_ - offset_bytes_; }

  // Reads exactly `n` bytes into `dst`; kDataLoss naming `what` if the file
  // ends first.
  absl::Status Read(void* dst, uint64_t n, absl::string_view what) {
    if (n > remaining_bytes() || std::fread(dst, 1, n, file_.get()) != n) {
      return DataLoss(absl::StrCat("truncated reading ", what));
    }
    offset_bytes_ += n;
    return absl::OkStatus();
  }

  absl::Status DataLoss(absl::string_view why) const {
    return absl::DataLossError(absl::StrCat("tokenizer file ", path_, ": ", why,
                                            " at byte offset ", offset_bytes_,
                                            " of ", size_bytes_));
  }

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  TokenizerFileReader(std::string path, std::FILE* file)
      : path_(std::move(path)), file_(file) {}

  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  uint64_t size_bytes_ = 0;
  uint64_t offset_bytes_ = 0;
};

// Common English pieces for Default(), most common first. Each contributes
// all of its substrings of two or more bytes, shortest first, so that every
// prefix of the vocabulary is closed under substrings: any adjacent pair of
// tokens inside a word concatenates to a piece, so a word in the vocabulary
// always merges into a single token when encoded on its own.
constexpr const char* kDefaultWords[] = {
    " the",    " a",       " and",      " to",       " was",     " he",
    " she",    " it",      " of",       " in",       " they",    " her",
    " his",    " said",    " with",     " you",      " on",      " for",
    " day",    " big",     " little",   " play",     " time",    " upon",
    " there",  " happy",   " saw",      " mom",      " friend",  " had",
    " not",    " but",     " so",       " that",     " is",      " very",
    " tree",   " girl",    " boy",      " named",    " wanted",  " went",
    " go",     " up",      " all",      " were",     " one",     " be",
    " we",     " can",     " what",     " do",       " see",     " like",
    " love",   " fun",     " toy",      " ball",     " dog",     " cat",
    " bird",   " park",    " sun",      " home",     " Once",    " One",
    " The",    " She",     " He",       " They",     " Lily",    " Tim",
    " Ben",    " Sue",     " Tom",      "ing",       "ed",       "er",
    "ly",      "'s",       "n't",       " I",        " me",      " my",
    " your",   " are",     " at",       " an",       " as",      " out",
    " back",   " help",    " look",     " looked",   " find",    " found",
    " came",   " made",    " make",     " felt",     " good",    " sad",
    " new",    " red",     " blue",     " box",      " car",     " cake",
    " water",  " sky",     " run",      " ran",      " jump",    " smile",
    " smiled", " nice",    " friends",  " together", " thought", " asked",
    " mommy",  " dad",     " everyone", " learned",  " always",  " never",
    " again",  " because", " could",    " would",
};

}  // namespace

absl::StatusOr<Tokenizer> Tokenizer::Load(const std::string& path,
                                          int vocab_size) {
  if (vocab_size < kMinVocabSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer file ", path, ": vocab_size ", vocab_size,
                     " is below ", kMinVocabSize, " (specials and bytes)"));
  }
  ASSIGN_OR_RETURN(TokenizerFileReader reader, TokenizerFileReader::Open(path));
  // The header's max_token_length sizes run.c's buffers; it is not trusted
  // here (the real maximum is computed from the pieces).
  int32_t max_token_length = 0;
  RETURN_IF_ERROR(reader.Read(&max_token_length, 4, "max_token_length"));
  std::vector<std::string> pieces;
  std::vector<float> scores;
  for (int i = 0; i < vocab_size; ++i) {
    const std::string entry = absl::StrCat("token ", i, " of ", vocab_size);
    float score = 0;
    int32_t length = 0;
    RETURN_IF_ERROR(reader.Read(&score, 4, absl::StrCat(entry, " score")));
    RETURN_IF_ERROR(reader.Read(&length, 4, absl::StrCat(entry, " length")));
    if (length <= 0) {
      // run.c's fread of a zero-length piece fails too.
      return reader.DataLoss(
          absl::StrCat(entry, " has non-positive length ", length));
    }
    if (static_cast<uint64_t>(length) > reader.remaining_bytes()) {
      return reader.DataLoss(absl::StrCat(entry, " has length ", length,
                                          " beyond the end of the file"));
    }
    std::string piece(static_cast<size_t>(length), '\0');
    RETURN_IF_ERROR(reader.Read(piece.data(), piece.size(), entry));
    pieces.push_back(std::move(piece));
    scores.push_back(score);
  }
  if (reader.remaining_bytes() != 0) {
    return reader.DataLoss(absl::StrCat(reader.remaining_bytes(),
                                        " trailing bytes after ", vocab_size,
                                        " tokens (wrong vocab_size?)"));
  }
  absl::StatusOr<Tokenizer> tokenizer =
      FromPieces(std::move(pieces), std::move(scores));
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat("tokenizer file ", path, ": ",
                                     tokenizer.status().message()));
  }
  return tokenizer;
}

Tokenizer Tokenizer::Default(int vocab_size) {
  CHECK_GE(vocab_size, kMinVocabSize + 95) << "Default() needs room for the "
                                              "specials, bytes and ASCII";
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  for (int b = 0; b < 256; ++b)
    pieces.push_back(absl::StrFormat("<0x%02X>", b));
  for (char c = ' '; c <= '~'; ++c) pieces.push_back(std::string(1, c));
  const size_t first_merged_id = pieces.size();
  absl::flat_hash_set<std::string> seen(pieces.begin(), pieces.end());
  auto add = [&](std::string piece) {
    if (pieces.size() < static_cast<size_t>(vocab_size) &&
        seen.insert(piece).second) {
      pieces.push_back(std::move(piece));
    }
  };
  for (absl::string_view word : kDefaultWords) {
    for (size_t length = 2; length <= word.size(); ++length) {
      for (size_t start = 0; start + length <= word.size(); ++start) {
        add(std::string(word.substr(start, length)));
      }
    }
  }
  // Beyond the word list: each earlier piece, in id order, followed by each
  // word. The list only grows, so this fills any vocab_size.
  for (size_t i = first_merged_id; pieces.size() < size_t(vocab_size); ++i) {
    CHECK_LT(i, pieces.size());
    for (const char* word : kDefaultWords) add(absl::StrCat(pieces[i], word));
  }
  // Longer pieces score higher (merges prefer them); within a length, lower
  // ids (more common pieces) score higher. Specials and bytes score 0.
  std::vector<float> scores(pieces.size(), 0.0f);
  for (size_t id = kMinVocabSize; id < pieces.size(); ++id) {
    scores[id] = static_cast<float>(pieces[id].size()) -
                 static_cast<float>(id) / static_cast<float>(vocab_size);
  }
  absl::StatusOr<Tokenizer> tokenizer =
      FromPieces(std::move(pieces), std::move(scores));
  CHECK_OK(tokenizer.status());
  return *std::move(tokenizer);
}

absl::StatusOr<Tokenizer> Tokenizer::FromPieces(std::vector<std::string> pieces,
                                                std::vector<float> scores) {
  if (pieces.size() != scores.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(pieces.size(), " pieces but ", scores.size(), " scores"));
  }
  if (pieces.size() < static_cast<size_t>(kMinVocabSize) ||
      pieces.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size ", pieces.size(),
                                                   " is outside [",
                                                   kMinVocabSize, ", 2^31)"));
  }
  Tokenizer t;
  t.pieces_ = std::move(pieces);
  t.scores_ = std::move(scores);
  t.piece_to_id_.reserve(t.pieces_.size());
  t.decoded_[0].reserve(t.pieces_.size());
  t.decoded_[1].reserve(t.pieces_.size());
  for (size_t id = 0; id < t.pieces_.size(); ++id) {
    std::string& piece = t.pieces_[id];
    piece.resize(std::strlen(piece.c_str()));  // C string: cut at a NUL.
    t.piece_to_id_.emplace(piece, static_cast<int>(id));  // First id wins.
    t.max_token_length_ =
        std::max(t.max_token_length_, static_cast<int>(piece.size()));
    t.decoded_[0].push_back(DecodePiece(piece));
    t.decoded_[1].push_back(DecodePiece(
        !piece.empty() && piece[0] == ' ' ? piece.substr(1) : piece));
  }
  return t;
}

int Tokenizer::Lookup(absl::string_view piece) const {
  auto it = piece_to_id_.find(piece);
  return it == piece_to_id_.end() ? -1 : it->second;
}

std::vector<int> Tokenizer::Encode(absl::string_view text, bool bos,
                                   bool eos) const {
  // Unlike run.c, which takes a C string and would end the text at its
  // first NUL, every byte is encoded: a NUL (no piece holds one) becomes
  // the byte token <0x00>. A prompt is never cut short.
  std::vector<int> tokens;
  tokens.reserve(text.size() + 3);
  if (bos) tokens.push_back(kBosToken);
  if (!text.empty()) {
    // The dummy prefix. run.c would push -1 if " " were not a piece; the
    // byte token for ' ' is used instead.
    const int space = Lookup(" ");
    tokens.push_back(space >= 0 ? space : ' ' + kByteTokenOffset);
  }
  // Group UTF-8 code points as run.c does: a non-continuation byte starts a
  // group; a group ends before a non-continuation byte or at 4 bytes.
  char group[kMaxCodepointBytes];
  int group_len = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!IsUtf8Continuation(text[i])) group_len = 0;
    group[group_len++] = text[i];
    const bool next_continues =
        i + 1 < text.size() && IsUtf8Continuation(text[i + 1]);
    if (next_continues && group_len < kMaxCodepointBytes) continue;
    const int id = Lookup(absl::string_view(group, group_len));
    if (id >= 0) {
      tokens.push_back(id);
    } else {
      for (int j = 0; j < group_len; ++j) {
        tokens.push_back(static_cast<unsigned char>(group[j]) +
                         kByteTokenOffset);
      }
    }
    group_len = 0;
  }
  MergePairs(tokens);
  if (eos) tokens.push_back(kEosToken);
  return tokens;
}

// run.c rescans all pairs after every merge (quadratic). This gives the same
// result in O(n log n): each round run.c merges the pair with the highest
// score, the leftmost on ties; a heap ordered by (score, -position) picks the
// same pair, since merging preserves the order of positions. Pairs whose ends
// changed since they were pushed are recognized by version and skipped.
// BOS takes part in merging, as in run.c.
void Tokenizer::MergePairs(std::vector<int>& tokens) const {
  const int n = static_cast<int>(tokens.size());
  if (n < 2) return;
  std::vector<int> next(n), prev(n);
  std::vector<uint32_t> version(n, 0);
  for (int i = 0; i < n; ++i) {
    next[i] = i + 1;
    prev[i] = i - 1;
  }
  struct Candidate {
    float score;
    int left;
    int right;
    uint32_t left_version;
    uint32_t right_version;
    int merged_id;
  };
  auto lower_priority = [](const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score < b.score;
    return a.left > b.left;
  };
  std::priority_queue<Candidate, std::vector<Candidate>,
                      decltype(lower_priority)>
      heap(lower_priority);
  std::string concat;
  auto consider = [&](int left) {
    if (left < 0 || next[left] >= n) return;
    const int right = next[left];
    const std::string& a = pieces_[tokens[left]];
    const std::string& b = pieces_[tokens[right]];
    if (a.size() + b.size() > static_cast<size_t>(max_token_length_)) return;
    concat.assign(a).append(b);
    const int id = Lookup(concat);
    if (id < 0 || !(scores_[id] > kMinMergeScore)) return;
    heap.push({scores_[id], left, right, version[left], version[right], id});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (version[c.left] != c.left_version ||
        version[c.right] != c.right_version) {
      continue;
    }
    tokens[c.left] = c.merged_id;
    ++version[c.left];
    ++version[c.right];  // Removed; never matches a candidate again.
    next[c.left] = next[c.right];
    if (next[c.left] < n) prev[next[c.left]] = c.left;
    consider(prev[c.left]);
    consider(c.left);
  }
  // Position 0 is never removed (only right ends are).
  int kept = 0;
  for (int i = 0; i < n; i = next[i]) tokens[kept++] = tokens[i];
  tokens.resize(kept);
}

std::string Tokenizer::Decode(int prev_token, int token) const {
  CHECK(token >= 0 && token < vocab_size())
      << "token " << token << " outside vocab of " << vocab_size();
  return decoded_[prev_token == kBosToken ? 1 : 0][token];
}

std::string Tokenizer::DecodeForPrint(int prev_token, int token) const {
  std::string piece = Decode(prev_token, token);
  if (piece.size() == 1 && !IsPrintOrSpace(piece[0])) return std::string();
  return piece;
}

std::string Tokenizer::DecodeAll(int prev_token,
                                 const std::vector<int>& tokens) const {
  std::string text;
  for (int token : tokens) {
    text += DecodeForPrint(prev_token, token);
    prev_token = token;
  }
  return text;
}

}  // namespace kvcanary::engine
