// The kvcanary-engine binary, run as a user would.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/engine/test_models.h"

namespace kvcanary::engine {
namespace {

struct Result {
  int exit_code;
  std::string out;  // stdout and stderr together
};

// `stderr_to`: where the command's stderr goes ("2>&1": with stdout).
Result RunEngine(const std::string& args,
                 const std::string& stderr_to = "2>&1") {
  const std::string cmd = std::string(KVCANARY_BIN_DIR) + "/kvcanary-engine " +
                          args + " " + stderr_to;
  FILE* p = popen(cmd.c_str(), "r");
  Result r{-1, ""};
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0)
    r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string Models() { return testing::SharedDir() + "/models"; }

TEST(EngineCliTest, GenerateEchoMatchesGoldenByteForByte) {
  KVC_REQUIRE_SHARED("golden/stories260K_t0_n256_prompt_Once_upon_a_time.txt");
  KVC_REQUIRE_STORIES260K(real);
  auto golden = testing::ReadFile(
      testing::SharedDir() +
      "/golden/stories260K_t0_n256_prompt_Once_upon_a_time.txt");
  ASSERT_TRUE(golden);
  const Result r = RunEngine("generate --model " + Models() +
                             "/stories260K.bin --tokenizer " + Models() +
                             "/tok512.bin --prompt 'Once upon a time' "
                             "--max-tokens 252 --temperature 0 --echo");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, *golden);
}

// The GGUF file with its own tokenizer, at the trained context, prints
// what run.c prints for stories260K.bin (its note goes to stderr).
TEST(EngineCliTest, GenerateFromTheGgufMatchesGoldenByteForByte) {
  KVC_REQUIRE_SHARED("golden/stories260K_t0_n256_prompt_Once_upon_a_time.txt",
                     "models/stories260K.gguf");
  auto golden = testing::ReadFile(
      testing::SharedDir() +
      "/golden/stories260K_t0_n256_prompt_Once_upon_a_time.txt");
  ASSERT_TRUE(golden);
  const std::string args = "generate --model " + Models() +
                           "/stories260K.gguf --context 512 --prompt 'Once "
                           "upon a time' --max-tokens 252 --echo";
  const Result r = RunEngine(args, "2>/dev/null");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, *golden);
  EXPECT_NE(RunEngine(args).out.find("note: "), std::string::npos);
}

TEST(EngineCliTest, WriteModelWritesAQ8_0GgufThatRuns) {
  KVC_REQUIRE_STORIES260K(real);
  const std::string path = ::testing::TempDir() + "/stories260K_q8_0.gguf";
  Result r =
      RunEngine("write-model --from " + Models() +
                "/stories260K.bin --format gguf --type q8_0 --out " + path);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("has no tokenizer"), std::string::npos) << r.out;
  r = RunEngine("generate --model " + path + " --prompt 'Once upon a time'");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("needs a tokenizer file"), std::string::npos) << r.out;
  r = RunEngine("generate --model " + path + " --tokenizer " + Models() +
                "/tok512.bin --prompt 'Once upon a time' --max-tokens 24");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("Lily"), std::string::npos) << r.out;
  r = RunEngine("write-model --from " + Models() +
                "/stories260K.bin --type q8_0 --out " + path);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("--format gguf"), std::string::npos) << r.out;
}

TEST(EngineCliTest, AContextPastTheCheckpointsIsAnError) {
  KVC_REQUIRE_STORIES260K(real);
  const Result r = RunEngine("generate --model " + Models() +
                             "/stories260K.bin " + "--tokenizer " + Models() +
                             "/tok512.bin --context 513 " + "--prompt hi");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("outside [1, 512]"), std::string::npos) << r.out;
}

TEST(EngineCliTest, EmbeddedDefaultModelRunsWithoutFiles) {
  const Result r = RunEngine("generate --prompt 'Hello there' --max-tokens 16");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(r.out.empty());
  EXPECT_EQ(r.out,
            RunEngine("generate --prompt 'Hello there' --max-tokens 16").out);
}

TEST(EngineCliTest, DemoCatchesThePlantedWriteAndExitsCleanly) {
  const Result r = RunEngine("demo");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("0 watermark violations"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("32 of 32 requests identical"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("foreign_tenant_read"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("DATA_LOSS"), std::string::npos) << r.out;
}

TEST(EngineCliTest, CorruptModelFileIsAClearErrorNamingTheFile) {
  const std::string path = ::testing::TempDir() + "/corrupt_model.bin";
  {
    std::ofstream f(path, std::ios::binary);
    const int header[7] = {64, 172, 5, 8, 4, 512, 512};
    f.write(reinterpret_cast<const char*>(header), sizeof(header));
    f << "not nearly enough weights";
  }
  const Result r = RunEngine("generate --model " + path + " --tokenizer " +
                             path + " --prompt hi --max-tokens 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find(path), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("truncated"), std::string::npos) << r.out;
}

TEST(EngineCliTest, MissingTokenizerAndBadFlagsAreUsageErrors) {
  EXPECT_EQ(RunEngine("generate --model /nonexistent.bin").exit_code, 1);
  EXPECT_EQ(RunEngine("frobnicate").exit_code, 2);
  EXPECT_EQ(RunEngine("generate --watermark=sometimes").exit_code, 1);
}

TEST(EngineCliTest, HelpListsTheSubcommands) {
  const Result r = RunEngine("--help");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  for (const char* sub :
       {"generate", "demo", "up", "serve", "faults", "write-model"}) {
    EXPECT_NE(r.out.find(std::string("\n  ") + sub + " "), std::string::npos)
        << sub << " missing from:\n"
        << r.out;
  }
}

TEST(EngineCliTest, UpHelpListsItsFlagsWithSentencesAndDefaults) {
  const Result r = RunEngine("up --help");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("--port=-1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("HTTP port to listen on"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--tenants=\"\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Tenants JSON file"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--fault=none"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Fault switches to turn on"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--num-pages=0"), std::string::npos) << r.out;
  // Only up's flags: generate's and the router role's are not listed.
  EXPECT_EQ(r.out.find("--prompt"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("--role"), std::string::npos) << r.out;
}

TEST(EngineCliTest, EverySubcommandHasHelp) {
  for (const char* sub :
       {"generate", "demo", "up", "serve", "faults", "write-model"}) {
    const Result r = RunEngine(std::string(sub) + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub << ": " << r.out;
    EXPECT_NE(r.out.find(std::string("usage: kvcanary-engine ") + sub),
              std::string::npos)
        << r.out;
  }
  EXPECT_NE(RunEngine("write-model -h").out.find("--out="), std::string::npos);
}

TEST(EngineCliTest, UnknownFlagExits2NamingIt) {
  const Result r = RunEngine("up --tenatns=t.json");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown flag --tenatns for 'up'"), std::string::npos)
      << r.out;
}

TEST(EngineCliTest, FlagOfAnotherSubcommandExits2NamingIt) {
  const Result r = RunEngine("generate --tenants=t.json --prompt hi");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--tenants does not apply to 'generate'"),
            std::string::npos)
      << r.out;
}

TEST(EngineCliTest, BadValueExits2NamingTheFlag) {
  Result r = RunEngine("up --port=-x --tenants=t.json");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("bad value for --port: '-x'"), std::string::npos)
      << r.out;
  r = RunEngine("generate --max-tokens=abc");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--max-tokens"), std::string::npos) << r.out;
  r = RunEngine("generate --echo=perhaps");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--echo"), std::string::npos) << r.out;
}

TEST(EngineCliTest, TheTuningFlagsAreListedAndCheckedBeforeAnyStart) {
  const Result help = RunEngine("up --help");
  for (const char* flag :
       {"--http-max-unoccupied-per-address=32", "--kv-max-unauthenticated=64",
        "--kv-max-unauthenticated-per-peer=4",
        "--kv-reserved-unauthenticated=32", "--kv-max-idle-sessions=64",
        "--kv-send-attempts=5"}) {
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag << help.out;
  }
  for (const char* bad :
       {"--kv-send-attempts=0", "--http-max-unoccupied-per-address=0",
        "--kv-max-idle-sessions=-1"}) {
    // Out of range: refused before any process starts, naming the flag.
    const Result r = RunEngine(std::string("up --tenants=t.json ") + bad);
    EXPECT_EQ(r.exit_code, 1) << bad << ": " << r.out;
    const std::string name(bad, std::string(bad).find('='));
    EXPECT_NE(r.out.find(name), std::string::npos) << r.out;
  }
}

TEST(EngineCliTest, MissingSubcommandOrStrayArgumentExits2) {
  EXPECT_EQ(RunEngine("").exit_code, 2);
  EXPECT_EQ(RunEngine("--max-tokens=3 generate").exit_code, 2);
  EXPECT_EQ(RunEngine("faults extra").exit_code, 2);
}

TEST(EngineCliTest, WriteModelWritesALoadableCheckpoint) {
  const std::string path = ::testing::TempDir() + "/synthetic260k.bin";
  ASSERT_EQ(
      RunEngine("write-model --shape 260k --seed 5 --out " + path).exit_code,
      0);
  auto model = LoadLlama2cModel(path);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->config.dim, 64);
}

}  // namespace
}  // namespace kvcanary::engine
