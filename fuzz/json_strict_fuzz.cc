// Fuzz target for the strict JSON parser of request bodies
// (common/json_strict.h): every body a tenant or a peer node sends is
// untrusted bytes. CHECKs what must hold for any input:
//   - a refusal is kInvalidArgument with a message, never a crash or an
//     exception;
//   - whatever the strict parser accepts, nlohmann's own parser accepts as
//     the same value (so we never read a body differently from it);
//   - whatever it accepts holds no NUL byte;
//   - parsing is deterministic.
// Built as a libFuzzer target with Clang (kvcanary_json_strict_fuzzer) and,
// for every compiler, driven by json_strict_fuzz_smoke_main.cc (ctest -L
// fuzz).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "common/check.h"
#include "common/json_strict.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<nlohmann::json> strict = kvcanary::ParseJsonStrict(text);
  const absl::StatusOr<nlohmann::json> again = kvcanary::ParseJsonStrict(text);
  CHECK_EQ(strict.ok(), again.ok());
  if (!strict.ok()) {
    CHECK(absl::IsInvalidArgument(strict.status())) << strict.status();
    CHECK(!strict.status().message().empty());
    return 0;
  }
  CHECK(*strict == *again);
  CHECK(text.find('\0') == std::string_view::npos);
  const nlohmann::json lenient =
      nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  CHECK(!lenient.is_discarded()) << text;
  CHECK(*strict == lenient) << text;
  return 0;
}
