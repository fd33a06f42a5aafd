// The internal node API's request parsing, and the request id no request
// may have (2^64 - 1, kReservedRequestId).
#include "engine/nodes/node_common.h"

#include <string>

#include "common/page_stamp.h"
#include "engine/core/engine.h"
#include "engine/nodes/openai_api.h"
#include "gtest/gtest.h"

namespace kvcanary::engine {
namespace {

nlohmann::json Body(uint64_t request_id) {
  nlohmann::json j;
  j["request_id"] = request_id;
  j["tenant_id"] = 2u;  // unsigned, as the router sends it
  j["prompt"] = {1, 5, 9};
  j["max_tokens"] = 4u;
  return j;
}

TEST(ParseNodeRequestTest, ReadsTheFieldsOfAnInternalRequest) {
  auto r = ParseNodeRequest(Body(77));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->id, RequestId(77));
  EXPECT_EQ(r->tenant, TenantId(2));
  EXPECT_EQ(r->prompt, (std::vector<int>{1, 5, 9}));
  EXPECT_EQ(r->sampling.max_tokens, 4);
}

TEST(ParseNodeRequestTest, TheReservedRequestIdIsABadRequest) {
  auto r = ParseNodeRequest(Body(kReservedRequestId.value()));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpStatusFor(r.status().code()), 400);
  EXPECT_NE(r.status().message().find("'request_id'"), absl::string_view::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("reserved"), absl::string_view::npos)
      << r.status();
  // The one below it is an ordinary id.
  auto below = ParseNodeRequest(Body(kReservedRequestId.value() - 1));
  ASSERT_TRUE(below.ok()) << below.status();
  EXPECT_EQ(below->id, RequestId(kReservedRequestId.value() - 1));
}

TEST(ParseNodeRequestTest, ZeroRequestIdIsStillABadRequest) {
  auto r = ParseNodeRequest(Body(0));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EngineSubmitTest, RefusesTheReservedRequestId) {
  const Model model = DefaultModel();
  Engine engine(&model, EngineOptions());
  SamplingParams sampling;
  sampling.max_tokens = 2;
  SubmitOptions options;
  options.id = kReservedRequestId;
  auto id = engine.Submit(TenantId(1), {1, 5, 9}, sampling, options);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(engine.has_work());
}

}  // namespace
}  // namespace kvcanary::engine
