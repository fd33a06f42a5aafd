// C2SP signed notes (c2sp.org/signed-note) with Ed25519 signatures, and the
// C2SP tlog-checkpoint body they carry (c2sp.org/tlog-checkpoint):
//
//   kvcanary/host-a                         <- origin
//   1234                                    <- tree size, decimal
//   <base64 of the 32-byte RFC 6962 root>   <- root hash
//                                           <- blank line
//   — kvcanary/host-a <base64(key id || 64-byte signature)>
//
// The signature is Ed25519 over the note text (every line up to and with the
// newline before the blank line). The key id is the first four bytes,
// big-endian, of SHA-256(key name || 0x0A || 0x01 || 32-byte public key),
// 0x01 being the signed-note signature type of Ed25519.
#ifndef KVCANARY_STORAGE_SIGNED_NOTE_H_
#define KVCANARY_STORAGE_SIGNED_NOTE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/ed25519_key.h"
#include "storage/merkle.h"

namespace kvcanary::storage {

// The signed-note key id of an Ed25519 key named `name`.
uint32_t NoteKeyId(absl::string_view name, const Ed25519Key& key);

// True iff `name` can name a note key: non-empty, valid in a note, no
// space and no '+'.
bool IsNoteKeyName(absl::string_view name);

struct NoteSignature {
  std::string name;
  uint32_t key_id = 0;
  std::string signature;  // the bytes after the key id (64 for Ed25519)
};

// A parsed note: text (ending in '\n') and its signature lines. Parsing
// checks the form only; OpenNote checks signatures.
struct Note {
  std::string text;
  std::vector<NoteSignature> signatures;

  // The note's bytes: text, blank line, one line per signature.
  std::string Encode() const;
  // kInvalidArgument naming what is wrong: not UTF-8, a control character,
  // no blank line before the signatures, a malformed signature line, more
  // than 100 signatures.
  static absl::StatusOr<Note> Decode(absl::string_view bytes);
};

// `text` signed by `key` under `name`. kInvalidArgument if the text is empty,
// does not end in '\n', holds a control character other than '\n', or the
// name is not a key name. REQUIRES: key.has_private().
absl::StatusOr<std::string> SignNote(absl::string_view text,
                                     absl::string_view name,
                                     const Ed25519Key& key);

// The note's text, once a signature by `key` verifies. A signature line is
// by `key` when its key id equals NoteKeyId(line name, key) and, if
// `name` is not empty, its name equals `name`; others are ignored, as the
// spec requires. kUnauthenticated if a signature by `key` fails or none is
// present; kInvalidArgument for a malformed note.
absl::StatusOr<std::string> OpenNote(absl::string_view bytes,
                                     const Ed25519Key& key,
                                     absl::string_view name = "");

// The tlog-checkpoint body.
struct Checkpoint {
  std::string origin;
  uint64_t tree_size = 0;
  MerkleHash root{};
  std::vector<std::string> extensions;  // optional extra lines, opaque

  std::string EncodeText() const;
  // kInvalidArgument naming the line: fewer than three lines, an empty
  // origin, a size with a sign, leading zero or overflow, a root that is
  // not base64 of 32 bytes, an empty extension line.
  static absl::StatusOr<Checkpoint> DecodeText(absl::string_view text);
};

// The checkpoint as a note signed by `key` under the key name `origin`.
absl::StatusOr<std::string> SignCheckpoint(const Checkpoint& checkpoint,
                                           const Ed25519Key& key);
// OpenNote with name = the checkpoint's origin, then DecodeText.
absl::StatusOr<Checkpoint> OpenCheckpoint(absl::string_view note_bytes,
                                          const Ed25519Key& key);

}  // namespace kvcanary::storage

#endif  // KVCANARY_STORAGE_SIGNED_NOTE_H_
