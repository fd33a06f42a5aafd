// The one JSON parser for request bodies (router, nodes, internal routes):
// nlohmann's, through its SAX interface, with what a proxy in front of us
// would also refuse, so we never read a body differently from it:
//   - any byte after the value but whitespace (a NUL included: nlohmann
//     alone takes a NUL for the end of the input and ignores the rest);
//   - a key twice in one object, at any depth (nlohmann alone keeps the
//     last).
#ifndef KVCANARY_COMMON_JSON_STRICT_H_
#define KVCANARY_COMMON_JSON_STRICT_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace kvcanary {

// The payload type URL under which a duplicate key's status carries the
// key's path, e.g. "max_tokens" or "messages[0].role" (the same URL the
// OpenAI error bodies read their "param" from: engine/nodes/openai_api.h).
inline constexpr absl::string_view kJsonParamUrl = "kvcanary/openai-param";

// The JSON value `text` holds, and nothing else. kInvalidArgument, its
// message starting "invalid JSON: ", for a syntax error, a number past
// double's range, a NUL or other bytes after the value, or a duplicate key
// (whose path is the kJsonParamUrl payload). Never throws.
absl::StatusOr<nlohmann::json> ParseJsonStrict(std::string_view text);

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_JSON_STRICT_H_
