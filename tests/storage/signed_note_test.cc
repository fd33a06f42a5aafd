#include "storage/signed_note.h"

#include <openssl/sha.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/ed25519_key.h"

namespace kvcanary::storage {
namespace {

using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  const std::string dir = absl::StrCat(
      ::testing::TempDir(), "/signed_note_test_", getpid(), "_", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
}

int Sh(const std::string& cmd) { return std::system(cmd.c_str()); }

bool HaveOpenSsl() { return Sh("openssl version >/dev/null 2>&1") == 0; }

Checkpoint Sample() {
  Checkpoint c;
  c.origin = "kvcanary/host-a";
  c.tree_size = 20852163;
  c.root = MerkleLeafHash("x");
  return c;
}

TEST(SignedNoteTest, KeyIdIsSha256OfNameNewlineTypeAndPublicKey) {
  const Ed25519Key key = *Ed25519Key::Generate();
  // SHA-256(key name || 0x0A || 0x01 || public key)[:4], big-endian.
  const std::string input = absl::StrCat(
      "example.com/log", "\n", std::string(1, '\x01'), key.RawPublic());
  unsigned char d[32];
  SHA256(reinterpret_cast<const unsigned char*>(input.data()), input.size(), d);
  const uint32_t want = (uint32_t{d[0]} << 24) | (uint32_t{d[1]} << 16) |
                        (uint32_t{d[2]} << 8) | d[3];
  EXPECT_EQ(NoteKeyId("example.com/log", key), want);
}

TEST(SignedNoteTest, CheckpointRoundTripsThroughASignedNote) {
  const Ed25519Key key = *Ed25519Key::Generate();
  const std::string note = *SignCheckpoint(Sample(), key);
  EXPECT_THAT(note, HasSubstr("kvcanary/host-a\n20852163\n"));
  EXPECT_THAT(note, HasSubstr("\n\n\xE2\x80\x94 kvcanary/host-a "));
  auto opened = OpenCheckpoint(note, key);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->origin, "kvcanary/host-a");
  EXPECT_EQ(opened->tree_size, 20852163u);
  EXPECT_EQ(opened->root, Sample().root);
}

TEST(SignedNoteTest, AnyEditedByteOrAnotherKeyFails) {
  const Ed25519Key key = *Ed25519Key::Generate();
  const std::string note = *SignCheckpoint(Sample(), key);
  for (size_t i = 0; i < note.size(); ++i) {
    std::string bad = note;
    bad[i] ^= 0x01;
    EXPECT_FALSE(OpenCheckpoint(bad, key).ok()) << "byte " << i;
  }
  const Ed25519Key other = *Ed25519Key::Generate();
  EXPECT_EQ(OpenCheckpoint(note, other).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(SignedNoteTest, UnknownSignaturesAreIgnoredAsTheSpecRequires) {
  const Ed25519Key key = *Ed25519Key::Generate();
  const Ed25519Key witness = *Ed25519Key::Generate();
  const std::string text = Sample().EncodeText();
  Note note = *Note::Decode(*SignNote(text, "kvcanary/host-a", key));
  Note by_witness =
      *Note::Decode(*SignNote(text, "witness.example/w1", witness));
  note.signatures.insert(note.signatures.begin(), by_witness.signatures[0]);
  EXPECT_TRUE(OpenCheckpoint(note.Encode(), key).ok());
  EXPECT_TRUE(OpenNote(note.Encode(), witness).ok());
}

TEST(SignedNoteTest, MalformedCheckpointsAreRejectedNamingTheLine) {
  EXPECT_THAT(Checkpoint::DecodeText("o\n012\nAAAA\n").status().message(),
              HasSubstr("line 2"));
  EXPECT_THAT(Checkpoint::DecodeText("o\n12\nAAAA\n").status().message(),
              HasSubstr("line 3"));
  EXPECT_FALSE(Checkpoint::DecodeText("o\n12\n").ok());
  EXPECT_FALSE(Note::Decode("no blank line\n\xE2\x80\x94 a AAAA\n").ok());
  EXPECT_FALSE(SignNote("no newline", "a", *Ed25519Key::Generate()).ok());
  EXPECT_FALSE(SignNote("x\n", "bad name", *Ed25519Key::Generate()).ok());
}

TEST(SignedNoteTest, KeysRoundTripThroughPem) {
  const Ed25519Key key = *Ed25519Key::Generate();
  const Ed25519Key priv = *Ed25519Key::FromPem(key.PrivatePem());
  const Ed25519Key pub = *Ed25519Key::FromPem(key.PublicPem());
  EXPECT_TRUE(priv.has_private());
  EXPECT_FALSE(pub.has_private());
  EXPECT_EQ(pub.RawPublic(), key.RawPublic());
  EXPECT_THAT(key.PrivatePem(), HasSubstr("-----BEGIN PRIVATE KEY-----"));
  EXPECT_THAT(key.PublicPem(), HasSubstr("-----BEGIN PUBLIC KEY-----"));
  EXPECT_TRUE(pub.Verify("m", *priv.Sign("m")));
  EXPECT_FALSE(Ed25519Key::FromPem("-----BEGIN PUBLIC KEY-----\nAAAA\n").ok());
}

TEST(SignedNoteTest, OpenSslCliKeysSignAndOurSignaturesVerifyWithOpenSsl) {
  if (!HaveOpenSsl()) GTEST_SKIP() << "no openssl CLI on PATH";
  const std::string dir = TempDir("cli");
  ASSERT_EQ(Sh(absl::StrCat("cd ", dir,
                            " && openssl genpkey -algorithm ed25519 -out k.pem"
                            " && openssl pkey -in k.pem -pubout -out k.pub")),
            0);
  auto key = Ed25519Key::ReadPemFile(dir + "/k.pem");
  auto pub = Ed25519Key::ReadPemFile(dir + "/k.pub");
  ASSERT_TRUE(key.ok()) << key.status();
  ASSERT_TRUE(pub.ok()) << pub.status();
  EXPECT_EQ(key->RawPublic(), pub->RawPublic());

  // Our signature over a checkpoint text, verified by `openssl pkeyutl`.
  const std::string text = Sample().EncodeText();
  WriteFile(dir + "/msg", text);
  WriteFile(dir + "/sig", *key->Sign(text));
  EXPECT_EQ(Sh(absl::StrCat("cd ", dir,
                            " && openssl pkeyutl -verify -pubin -inkey k.pub"
                            " -rawin -in msg -sigfile sig >/dev/null")),
            0);
  // And the note signed with it opens with the public key openssl wrote.
  EXPECT_TRUE(OpenCheckpoint(*SignCheckpoint(Sample(), *key), *pub).ok());

  // A signature made by `openssl pkeyutl -sign -rawin` verifies with ours.
  ASSERT_EQ(Sh(absl::StrCat("cd ", dir,
                            " && openssl pkeyutl -sign -inkey k.pem -rawin"
                            " -in msg -out osig")),
            0);
  std::ifstream in(dir + "/osig", std::ios::binary);
  const std::string osig((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(osig.size(), 64u);
  EXPECT_TRUE(pub->Verify(text, osig));
  EXPECT_FALSE(pub->Verify(text + "x", osig));

  // Keys we write are read by openssl.
  const Ed25519Key ours = *Ed25519Key::Generate();
  WriteFile(dir + "/ours.pem", ours.PrivatePem());
  WriteFile(dir + "/ours.pub", ours.PublicPem());
  EXPECT_EQ(Sh(absl::StrCat("cd ", dir,
                            " && openssl pkey -in ours.pem -noout"
                            " && openssl pkey -pubin -in ours.pub -noout")),
            0);
}

}  // namespace
}  // namespace kvcanary::storage
