// Fuzz target for GGUF files (docs/gguf.md): the header decoder
// (gguf::File::Decode) and the llama model and tokenizer built on it
// (DecodeGgufModel). CHECKs what must hold for any input:
//   - every failure is kDataLoss, kInvalidArgument or kUnimplemented;
//   - the header encoding is canonical: a decoded header re-encodes, with
//     the same tensor data after it, to a file that decodes to the same
//     header and the same model verdict;
//   - a model that loads is a valid one: its config validates, every tensor
//     has the size the config gives, its tokenizer (if any) covers the
//     vocabulary.
// Built as a libFuzzer target with Clang (kvcanary_gguf_fuzzer) and, for
// every compiler, driven by gguf_fuzz_smoke_main.cc (ctest -L fuzz).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/check.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_model.h"

namespace kvcanary::engine {
namespace {

bool IsCleanError(const absl::Status& s) {
  return absl::IsDataLoss(s) || absl::IsInvalidArgument(s) ||
         absl::IsUnimplemented(s);
}

void CheckModel(const absl::StatusOr<GgufModel>& m) {
  if (!m.ok()) {
    CHECK(IsCleanError(m.status())) << m.status();
    return;
  }
  CHECK_OK(CheckWeightSizes(m->model));
  if (m->tokenizer.has_value()) {
    CHECK_EQ(m->tokenizer->vocab_size(), m->model.config.vocab_size);
  }
}

}  // namespace
}  // namespace kvcanary::engine

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvcanary::engine;  // NOLINT: file-local driver
  const absl::string_view in(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<gguf::File> file = gguf::File::Decode(in);
  const absl::StatusOr<GgufModel> model = DecodeGgufModel(in, "fuzz", {});
  CheckModel(model);
  if (!file.ok()) {
    CHECK(IsCleanError(file.status())) << file.status();
    CHECK(!model.ok()) << "a model loaded from a file whose header fails";
    return 0;
  }
  // The header re-encoded in front of the same tensor data.
  std::string again;
  gguf::File copy = *file;
  copy.EncodeTo(&again);
  const absl::string_view tensor_data =
      in.substr(std::min<uint64_t>(file->data_offset, size));
  again.append(tensor_data.data(), tensor_data.size());
  absl::StatusOr<gguf::File> redecoded = gguf::File::Decode(again);
  CHECK(redecoded.ok()) << "a re-encoded header fails: " << redecoded.status();
  std::string third;
  redecoded->EncodeTo(&third);
  CHECK(third == again.substr(0, redecoded->data_offset))
      << "re-encoding is not stable";
  const absl::StatusOr<GgufModel> remodel = DecodeGgufModel(again, "fuzz", {});
  CHECK(remodel.status() == model.status())
      << "the same header and data gave " << remodel.status() << " vs "
      << model.status();
  return 0;
}
