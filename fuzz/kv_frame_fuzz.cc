// Fuzz target for the KV frame decoder (docs/kv-transfer.md). Feeds the
// input to DecodeOneFrame and to a FrameDecoder (whole, and in two chunks)
// and CHECKs what must hold for any input:
//   - every failure is kDataLoss, and a failed decoder stays failed;
//   - the encoding is canonical: a decoded frame re-encodes to exactly the
//     bytes it was decoded from, and that re-encoding decodes again;
//   - how the bytes are chunked does not change what the stream decodes to.
// Built as a libFuzzer target with Clang (kvcanary_kv_frame_fuzzer) and, for
// every compiler, driven by fuzz_smoke_main.cc (ctest -L fuzz).
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/check.h"
#include "engine/transfer/kv_transfer_format.h"

namespace kvcanary::engine::kv {
namespace {

std::string Encoded(const Frame& frame) {
  std::string out;
  EncodeFrame(frame, &out);
  return out;
}

// Decodes every frame `d` has, appending each one's re-encoding to *out.
// Returns OK when the decoder stops for more bytes, else its error.
absl::Status Drain(FrameDecoder* d, std::string* out) {
  while (true) {
    absl::StatusOr<std::optional<Frame>> next = d->Next();
    if (!next.ok()) {
      CHECK(absl::IsDataLoss(next.status())) << next.status();
      absl::StatusOr<std::optional<Frame>> again = d->Next();
      CHECK(!again.ok() && again.status() == next.status())
          << "a failed decoder must stay failed";
      return next.status();
    }
    if (!next->has_value()) return absl::OkStatus();
    const std::string bytes = Encoded(**next);
    absl::StatusOr<Frame> again = DecodeOneFrame(bytes);
    CHECK(again.ok()) << "a re-encoded frame fails to decode: "
                      << again.status();
    CHECK(Encoded(*again) == bytes) << "re-encoding is not stable";
    out->append(bytes);
  }
}

}  // namespace
}  // namespace kvcanary::engine::kv

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvcanary::engine::kv;  // NOLINT: file-local driver
  const absl::string_view in(reinterpret_cast<const char*>(data), size);

  // 1. Exactly one frame.
  absl::StatusOr<Frame> one = DecodeOneFrame(in);
  if (one.ok()) {
    CHECK(Encoded(*one) == in) << "a decoded frame re-encodes differently";
  } else {
    CHECK(absl::IsDataLoss(one.status())) << one.status();
  }

  // 2. The whole input as a stream. The re-encoded frames must reproduce
  // exactly the bytes the decoder consumed.
  FrameDecoder whole;
  whole.Feed(in);
  std::string whole_out;
  const absl::Status whole_status = Drain(&whole, &whole_out);
  CHECK(in.substr(0, whole_out.size()) == whole_out)
      << "stream frames re-encode differently";
  if (whole_status.ok()) {
    CHECK_EQ(whole.buffered_bytes(), in.size() - whole_out.size());
  }
  if (one.ok()) {
    CHECK(whole_status.ok() && whole_out == in && whole.buffered_bytes() == 0)
        << "DecodeOneFrame and FrameDecoder disagree";
  }

  // 3. The same stream in two chunks, split at a point the input picks.
  const size_t split =
      size == 0 ? 0 : (data[0] * 131u + data[size - 1]) % (size + 1);
  FrameDecoder chunked;
  chunked.Feed(in.substr(0, split));
  std::string chunked_out;
  absl::Status chunked_status = Drain(&chunked, &chunked_out);
  if (chunked_status.ok()) {
    chunked.Feed(in.substr(split));
    chunked_status = Drain(&chunked, &chunked_out);
  }
  CHECK(chunked_out == whole_out) << "chunking changed the frames";
  CHECK(chunked_status == whole_status)
      << "chunking changed the verdict: " << chunked_status << " vs "
      << whole_status;
  return 0;
}
