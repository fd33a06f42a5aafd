// The OpenAI-compatible HTTP API as data, in four parts: requests
// (openai_request.h), errors (openai_errors.h), answers
// (openai_responses.h) and stop strings (stop_matcher.h). This header
// includes them all, for code that uses several; code that needs one part
// includes its header. No I/O; the router owns the sockets. docs/api.md is
// the user-facing description.
#ifndef KVCANARY_ENGINE_NODES_OPENAI_API_H_
#define KVCANARY_ENGINE_NODES_OPENAI_API_H_

#include "engine/nodes/openai_errors.h"
#include "engine/nodes/openai_request.h"
#include "engine/nodes/openai_responses.h"
#include "engine/nodes/stop_matcher.h"

#endif  // KVCANARY_ENGINE_NODES_OPENAI_API_H_
