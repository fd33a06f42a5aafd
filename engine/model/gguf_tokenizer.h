// A llama model's tokenizer in GGUF metadata (docs/gguf.md): read from the
// `tokenizer.ggml.*` keys into the engine's Tokenizer, refusing what its
// encoder does not do, and written back as llama.cpp's converters write
// them. Pieces are spelt as llama2.c's tokenizer export spells them, so
// tok512.bin is stories260K.gguf's tokenizer exactly.
#ifndef KVCANARY_ENGINE_MODEL_GGUF_TOKENIZER_H_
#define KVCANARY_ENGINE_MODEL_GGUF_TOKENIZER_H_

#include <optional>

#include "absl/status/statusor.h"
#include "engine/model/gguf.h"
#include "engine/model/tokenizer.h"

namespace kvcanary::engine::gguf {

// The tokenizer of `f`, whose model has `vocab_size` tokens; nullopt when
// `f` has no tokenizer.ggml.tokens. kUnimplemented for a tokenizer other
// than llama's sentencepiece (or without its space prefix);
// kInvalidArgument for a mistyped key, or a tokenizer that does not fit
// the engine's (size not the vocabulary, BOS not 1, EOS not 2, byte tokens
// not <0x00>..<0xFF> at ids 3..258).
absl::StatusOr<std::optional<Tokenizer>> TokenizerFromMetadata(const File& f,
                                                               int vocab_size);

// Appends `tokenizer` to f's metadata as tokenizer.ggml.*: the model,
// tokens, scores, token types and the unknown, BOS and EOS ids.
void AddTokenizer(const Tokenizer& tokenizer, File* f);

}  // namespace kvcanary::engine::gguf

#endif  // KVCANARY_ENGINE_MODEL_GGUF_TOKENIZER_H_
