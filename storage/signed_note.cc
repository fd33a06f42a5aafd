#include "storage/signed_note.h"

#include <array>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace kvcanary::storage {
namespace {

constexpr absl::string_view kEmDash = "\xE2\x80\x94";  // U+2014
constexpr unsigned char kEd25519Type = 0x01;
constexpr size_t kMaxSignatures = 100;

// Well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool IsUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char cc = s[i + k];
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

bool HasControl(absl::string_view s) {
  for (const char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') return true;
  }
  return false;
}

// Strict standard base64 (RFC 4648 section 4, padded): decoding and
// re-encoding must give the input back.
bool StrictBase64Decode(absl::string_view in, std::string* out) {
  if (!absl::Base64Unescape(in, out)) return false;
  return absl::Base64Escape(*out) == in;
}

absl::StatusOr<NoteSignature> ParseSignatureLine(absl::string_view line) {
  if (!absl::ConsumePrefix(&line, kEmDash) ||
      !absl::ConsumePrefix(&line, " ")) {
    return absl::InvalidArgumentError(
        "a signature line must start with an em dash and a space");
  }
  const size_t space = line.find(' ');
  if (space == absl::string_view::npos) {
    return absl::InvalidArgumentError("a signature line has no signature");
  }
  NoteSignature sig;
  sig.name = std::string(line.substr(0, space));
  if (!IsNoteKeyName(sig.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad key name '", absl::CEscape(sig.name), "'"));
  }
  std::string raw;
  if (!StrictBase64Decode(line.substr(space + 1), &raw) || raw.size() < 5) {
    return absl::InvalidArgumentError(absl::StrCat(
        "signature of key '", sig.name, "' is not base64 of key id + bytes"));
  }
  sig.key_id = (uint32_t{static_cast<unsigned char>(raw[0])} << 24) |
               (uint32_t{static_cast<unsigned char>(raw[1])} << 16) |
               (uint32_t{static_cast<unsigned char>(raw[2])} << 8) |
               uint32_t{static_cast<unsigned char>(raw[3])};
  sig.signature = raw.substr(4);
  return sig;
}

absl::Status CheckText(absl::string_view text) {
  if (text.empty() || text.back() != '\n') {
    return absl::InvalidArgumentError("note text must end in a newline");
  }
  if (!IsUtf8(text)) return absl::InvalidArgumentError("note is not UTF-8");
  if (HasControl(text)) {
    return absl::InvalidArgumentError(
        "note holds a control character other than newline");
  }
  return absl::OkStatus();
}

}  // namespace

bool IsNoteKeyName(absl::string_view name) {
  if (name.empty() || !IsUtf8(name) || HasControl(name)) return false;
  return name.find(' ') == absl::string_view::npos &&
         name.find('+') == absl::string_view::npos &&
         name.find('\n') == absl::string_view::npos;
}

uint32_t NoteKeyId(absl::string_view name, const Ed25519Key& key) {
  const std::string input = absl::StrCat(
      name, "\n",
      absl::string_view(reinterpret_cast<const char*>(&kEd25519Type), 1),
      key.RawPublic());
  const std::array<uint8_t, 32> digest = Sha256(input);
  return (uint32_t{digest[0]} << 24) | (uint32_t{digest[1]} << 16) |
         (uint32_t{digest[2]} << 8) | uint32_t{digest[3]};
}

std::string Note::Encode() const {
  std::string out = absl::StrCat(text, "\n");
  for (const NoteSignature& s : signatures) {
    std::string raw;
    for (int shift = 24; shift >= 0; shift -= 8) {
      raw.push_back(static_cast<char>((s.key_id >> shift) & 0xFF));
    }
    raw += s.signature;
    absl::StrAppend(&out, kEmDash, " ", s.name, " ", absl::Base64Escape(raw),
                    "\n");
  }
  return out;
}

absl::StatusOr<Note> Note::Decode(absl::string_view bytes) {
  if (!IsUtf8(bytes)) return absl::InvalidArgumentError("note is not UTF-8");
  if (HasControl(bytes)) {
    return absl::InvalidArgumentError(
        "note holds a control character other than newline");
  }
  // The text ends at the last blank line ("\n\n").
  const size_t split = bytes.rfind("\n\n");
  if (split == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        "note has no blank line before its signatures");
  }
  Note note;
  note.text = std::string(bytes.substr(0, split + 1));
  absl::string_view sigs = bytes.substr(split + 2);
  if (sigs.empty() || sigs.back() != '\n') {
    return absl::InvalidArgumentError("note must end in a signature line");
  }
  sigs.remove_suffix(1);
  for (absl::string_view line : absl::StrSplit(sigs, '\n')) {
    if (note.signatures.size() == kMaxSignatures) {
      return absl::InvalidArgumentError("note has too many signatures");
    }
    ASSIGN_OR_RETURN(NoteSignature sig, ParseSignatureLine(line));
    note.signatures.push_back(std::move(sig));
  }
  return note;
}

absl::StatusOr<std::string> SignNote(absl::string_view text,
                                     absl::string_view name,
                                     const Ed25519Key& key) {
  RETURN_IF_ERROR(CheckText(text));
  if (!IsNoteKeyName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", absl::CEscape(name), "' is not a note key name"));
  }
  Note note;
  note.text = std::string(text);
  NoteSignature sig;
  sig.name = std::string(name);
  sig.key_id = NoteKeyId(name, key);
  ASSIGN_OR_RETURN(sig.signature, key.Sign(text));
  note.signatures.push_back(std::move(sig));
  return note.Encode();
}

absl::StatusOr<std::string> OpenNote(absl::string_view bytes,
                                     const Ed25519Key& key,
                                     absl::string_view name) {
  ASSIGN_OR_RETURN(const Note note, Note::Decode(bytes));
  bool verified = false;
  for (const NoteSignature& sig : note.signatures) {
    if (!name.empty() && sig.name != name) continue;
    if (sig.key_id != NoteKeyId(sig.name, key)) continue;  // another key
    if (!key.Verify(note.text, sig.signature)) {
      return absl::UnauthenticatedError(
          absl::StrCat("the signature of key '", sig.name,
                       "' does not verify: the note "
                       "was altered or signed by another key"));
    }
    verified = true;
  }
  if (!verified) {
    return absl::UnauthenticatedError(
        name.empty() ? std::string("no signature by the given public key")
                     : absl::StrCat("no signature by the given public key "
                                    "under the name '",
                                    name, "'"));
  }
  return note.text;
}

std::string Checkpoint::EncodeText() const {
  std::string out =
      absl::StrCat(origin, "\n", tree_size, "\n",
                   absl::Base64Escape(MerkleHashBytes(root)), "\n");
  for (const std::string& e : extensions) absl::StrAppend(&out, e, "\n");
  return out;
}

absl::StatusOr<Checkpoint> Checkpoint::DecodeText(absl::string_view text) {
  if (text.empty() || text.back() != '\n') {
    return absl::InvalidArgumentError("checkpoint text must end in a newline");
  }
  text.remove_suffix(1);
  const std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (lines.size() < 3) {
    return absl::InvalidArgumentError(
        "a checkpoint has an origin, a tree size and a root hash line");
  }
  Checkpoint c;
  if (lines[0].empty()) {
    return absl::InvalidArgumentError("checkpoint line 1: empty origin");
  }
  c.origin = std::string(lines[0]);
  const absl::string_view size = lines[1];
  bool digits = !size.empty() && (size == "0" || size[0] != '0');
  for (const char ch : size) digits = digits && ch >= '0' && ch <= '9';
  if (!digits || !absl::SimpleAtoi(size, &c.tree_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint line 2: '", absl::CEscape(size),
                     "' is not a tree size (decimal, no leading zero)"));
  }
  std::string raw;
  if (!StrictBase64Decode(lines[2], &raw) || raw.size() != 32) {
    return absl::InvalidArgumentError(
        "checkpoint line 3: not the base64 of a 32-byte root hash");
  }
  c.root = *MerkleHashFromBytes(raw);
  for (size_t i = 3; i < lines.size(); ++i) {
    if (lines[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint line ", i + 1, ": empty extension line"));
    }
    c.extensions.emplace_back(lines[i]);
  }
  return c;
}

absl::StatusOr<std::string> SignCheckpoint(const Checkpoint& checkpoint,
                                           const Ed25519Key& key) {
  return SignNote(checkpoint.EncodeText(), checkpoint.origin, key);
}

absl::StatusOr<Checkpoint> OpenCheckpoint(absl::string_view note_bytes,
                                          const Ed25519Key& key) {
  ASSIGN_OR_RETURN(const Note note, Note::Decode(note_bytes));
  // The origin read here is not trusted yet: it only picks the key name the
  // signature must carry; OpenNote then verifies the text it came from.
  ASSIGN_OR_RETURN(const Checkpoint unverified,
                   Checkpoint::DecodeText(note.text));
  ASSIGN_OR_RETURN(const std::string text,
                   OpenNote(note_bytes, key, unverified.origin));
  return Checkpoint::DecodeText(text);
}

}  // namespace kvcanary::storage
