// The watermark check on the single-node engine: another tenant's bytes are
// planted in a running request's pages (as a late transfer write would) and
// the attention kernel must catch it, serve in detect, refuse in enforce.
#include <vector>

#include "engine/core/engine.h"
#include "gtest/gtest.h"
#include "kernels/paged_attention.h"

namespace kvcanary::engine {
namespace {

constexpr TenantId kVictim{1}, kOther{2};

// Overwrites slot 0 of the request's first page in every layer with K/V
// stamped by another tenant.
void PlantForeignWrite(Engine& engine, const Sequence& seq) {
  PagePool* pool = engine.mutable_pool();
  const PageRef ref = seq.block_table[0];
  std::vector<float> row(pool->layout().kv_heads * pool->layout().head_dim,
                         0.1f);
  for (int l = 0; l < pool->n_layers(); ++l) {
    kernels::WriteKvRow(pool->layer_base(l), pool->layout(), ref, 0, row.data(),
                        row.data(),
                        StampIdentity{RequestId(777), kOther, ref.generation},
                        static_cast<uint32_t>(l), nullptr);
  }
}

struct Outcome {
  FinishReason reason;
  absl::Status status;
  size_t output_before, output_after;
  std::vector<WatermarkViolation> violations;
};

Outcome RunWithPlantedWrite(WatermarkMode mode) {
  static const Model model = DefaultModel();
  EngineOptions o;
  o.watermark = mode;
  Engine engine(&model, o);
  SamplingParams s;
  s.max_tokens = 20;
  auto id = engine.Submit(kVictim, {1, 300, 301, 302, 303}, s);
  EXPECT_TRUE(id.ok());
  for (int i = 0; i < 3; ++i) engine.Step();
  Outcome out;
  out.output_before = engine.Get(*id)->output.size();
  PlantForeignWrite(engine, *engine.Get(*id));
  engine.RunUntilIdle();
  const Sequence& seq = *engine.Get(*id);
  out.reason = seq.state.finish_reason();
  out.status = seq.state.abort_status();
  out.output_after = seq.output.size();
  out.violations = seq.violations;
  EXPECT_EQ(engine.pool().num_used_pages(), 0);
  return out;
}

TEST(EngineWatermarkTest, EnforceRefusesTheRequestAndReturnsNoMoreText) {
  const Outcome out = RunWithPlantedWrite(WatermarkMode::kEnforce);
  EXPECT_EQ(out.reason, FinishReason::kAbort);
  EXPECT_EQ(out.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(out.status.message().find("foreign_tenant_read"),
            absl::string_view::npos)
      << out.status;
  EXPECT_EQ(out.output_after, out.output_before);  // nothing built on it
  ASSERT_FALSE(out.violations.empty());
  EXPECT_EQ(out.violations[0].writer.tenant, kOther);
  EXPECT_EQ(out.violations[0].reader.tenant, kVictim);
}

TEST(EngineWatermarkTest, DetectServesAndRecordsAttributedViolations) {
  const Outcome out = RunWithPlantedWrite(WatermarkMode::kDetect);
  EXPECT_NE(out.reason, FinishReason::kAbort);
  EXPECT_GT(out.output_after, out.output_before);
  ASSERT_FALSE(out.violations.empty());
  for (const auto& v : out.violations) {
    EXPECT_EQ(v.kind, ViolationKind::kForeignTenantRead);
    EXPECT_EQ(v.writer.tenant, kOther);
    EXPECT_EQ(v.writer.request, RequestId(777));
    EXPECT_EQ(v.reader.tenant, kVictim);
  }
}

TEST(EngineWatermarkTest, OffServesWithoutLooking) {
  const Outcome out = RunWithPlantedWrite(WatermarkMode::kOff);
  EXPECT_NE(out.reason, FinishReason::kAbort);
  EXPECT_TRUE(out.violations.empty());
}

TEST(EngineWatermarkTest, CleanMultiTenantRunHasNoViolations) {
  const Model model = DefaultModel();
  EngineOptions o;
  o.num_pages = 40;  // forces page reuse across tenants
  o.num_threads = 2;
  Engine engine(&model, o);
  SamplingParams s;
  s.max_tokens = 24;
  std::vector<RequestId> ids;
  for (int i = 0; i < 40; ++i) {
    std::vector<int> prompt = {1};
    for (int t = 0; t < 5 + (i * 7) % 60; ++t)
      prompt.push_back(260 + (i + t) % 90);
    auto id = engine.Submit(TenantId(1 + i % 8), prompt, s);
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
    if (i % 3 == 0) engine.Step();
  }
  engine.RunUntilIdle();
  for (RequestId id : ids) {
    const Sequence* seq = engine.Get(id);
    EXPECT_TRUE(seq->violations.empty()) << seq->violations[0].DebugString();
    EXPECT_NE(seq->state.finish_reason(), FinishReason::kAbort)
        << seq->state.abort_status();
  }
}

}  // namespace
}  // namespace kvcanary::engine
