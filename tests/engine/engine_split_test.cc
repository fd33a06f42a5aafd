// Prefill on one engine, decode on another, K/V handed over as transfer
// pages: the output must equal the single-engine output exactly.
#include <vector>

#include "engine/core/engine.h"
#include "engine/core/kv_export.h"
#include "gtest/gtest.h"

namespace kvcanary::engine {
namespace {

SamplingParams Greedy(int max_tokens) {
  SamplingParams s;
  s.max_tokens = max_tokens;
  return s;
}

std::vector<int> LocalOutput(const Model& model, const std::vector<int>& prompt,
                             int max_tokens) {
  Engine engine(&model, EngineOptions{});
  auto id = engine.Submit(TenantId(3), prompt, Greedy(max_tokens));
  EXPECT_TRUE(id.ok());
  engine.RunUntilIdle();
  return engine.Get(*id)->output;
}

TEST(EngineSplitTest, PrefillThenTransferThenDecodeEqualsLocal) {
  const Model model = DefaultModel();
  const std::vector<int> prompt = {1,   300, 301, 302, 303, 304, 305, 306, 307,
                                   308, 309, 310, 311, 312, 313, 314, 315, 316};
  const RequestId rid(4242);
  Engine prefill(&model, EngineOptions{});
  Engine decode(&model, EngineOptions{});
  // Decode reserves first.
  ASSERT_TRUE(decode
                  .Submit(TenantId(3), prompt, Greedy(30),
                          {rid, SequenceRole::kRemotePrefill})
                  .ok());
  StepEvents ev = decode.Step();
  ASSERT_EQ(ev.reserved, std::vector<RequestId>{rid});
  EXPECT_EQ(decode.Get(rid)->state.phase(), RequestPhase::kTransferring);
  EXPECT_FALSE(decode.has_work());
  // Prefill computes K/V and the first token, and holds the pages.
  ASSERT_TRUE(prefill
                  .Submit(TenantId(3), prompt, Greedy(1),
                          {rid, SequenceRole::kPrefillOnly})
                  .ok());
  ev = prefill.Step();
  ASSERT_EQ(ev.prefilled, std::vector<RequestId>{rid});
  const Sequence& p = *prefill.Get(rid);
  EXPECT_EQ(p.state.phase(), RequestPhase::kTransferring);
  EXPECT_GT(prefill.pool().num_used_pages(), 0);
  const auto pages = ExportKvPages(prefill.pool(), p.block_table,
                                   static_cast<int>(prompt.size()));
  EXPECT_EQ(pages.size(), 2u * model.config.n_layers);  // 18 tokens: 2 pages
  ASSERT_TRUE(decode
                  .InstallTransferredKv(
                      rid, pages, static_cast<int>(prompt.size()), p.output[0])
                  .ok());
  prefill.FinishTransfer(rid, absl::OkStatus());
  EXPECT_EQ(prefill.Get(rid)->state.finish_reason(),
            FinishReason::kTransferred);
  // Only the prompt's one full page is left, in the prefix cache.
  EXPECT_EQ(prefill.pool().num_used_pages(), 1);
  EXPECT_EQ(prefill.prefix_cache()->num_unused(), 1);
  decode.RunUntilIdle();
  const Sequence& d = *decode.Get(rid);
  EXPECT_TRUE(d.violations.empty()) << d.violations[0].DebugString();
  EXPECT_EQ(d.output, LocalOutput(model, prompt, 30));
  EXPECT_EQ(decode.pool().num_used_pages(), 0);
}

TEST(EngineSplitTest, FailedTransferFreesPrefillPagesWithTheReason) {
  const Model model = DefaultModel();
  Engine prefill(&model, EngineOptions{});
  ASSERT_TRUE(prefill
                  .Submit(TenantId(1), {1, 300, 301}, Greedy(1),
                          {RequestId(7), SequenceRole::kPrefillOnly})
                  .ok());
  prefill.Step();
  prefill.FinishTransfer(RequestId(7),
                         absl::UnavailableError("decode node gone"));
  EXPECT_EQ(prefill.Get(RequestId(7))->state.finish_reason(),
            FinishReason::kAbort);
  EXPECT_EQ(prefill.pool().num_used_pages(), 0);
}

TEST(EngineSplitTest, InstallRejectsPagesOutsideTheReservation) {
  const Model model = DefaultModel();
  Engine decode(&model, EngineOptions{});
  ASSERT_TRUE(decode
                  .Submit(TenantId(1), {1, 300, 301}, Greedy(4),
                          {RequestId(9), SequenceRole::kRemotePrefill})
                  .ok());
  decode.Step();
  kv::Page page;
  page.index = 5;  // the reservation has 1 page
  page.slots = 1;
  page.kv_bytes.assign(2 * model.config.kv_dim() * sizeof(float), '\0');
  EXPECT_EQ(decode.InstallTransferredKv(RequestId(9), {page}, 3, 300).code(),
            absl::StatusCode::kInvalidArgument);
  decode.Abort(RequestId(9), absl::CancelledError("test"));
  EXPECT_EQ(decode.pool().num_used_pages(), 0);
}

TEST(EngineSplitTest, DuplicateRequestIdIsRejected) {
  const Model model = DefaultModel();
  Engine engine(&model, EngineOptions{});
  ASSERT_TRUE(
      engine.Submit(TenantId(1), {1, 5}, Greedy(2), {RequestId(3)}).ok());
  EXPECT_EQ(engine.Submit(TenantId(1), {1, 5}, Greedy(2), {RequestId(3)})
                .status()
                .code(),
            absl::StatusCode::kAlreadyExists);
}

// A decode engine reserves pages for a 40-token prompt and the request is
// aborted before any K/V arrives; then the same tenant reserves for the
// same prompt. Returns the second reservation's cached pages.
int CachedPagesAfterAnAbortedReservation(const FaultSet& faults) {
  const Model model = DefaultModel();
  EngineOptions o;
  o.faults = faults;
  Engine decode(&model, o);
  std::vector<int> prompt = {1};
  for (int i = 0; i < 39; ++i) prompt.push_back(300 + i);
  for (uint64_t id : {1, 2}) {
    EXPECT_TRUE(decode
                    .Submit(TenantId(3), prompt, Greedy(4),
                            {RequestId(id), SequenceRole::kRemotePrefill})
                    .ok());
    decode.Step();
    EXPECT_EQ(decode.Get(RequestId(id))->state.phase(),
              RequestPhase::kTransferring);
    if (id == 1) decode.Abort(RequestId(1), absl::CancelledError("gone"));
  }
  return decode.Get(RequestId(2))->shared_pages;
}

TEST(EngineSplitTest, AnAbortedReservationIsNeverCached) {
  EXPECT_EQ(CachedPagesAfterAnAbortedReservation(FaultSet()), 0);
}

TEST(EngineSplitTest, AbortCacheInsertCachesTheUnwrittenReservation) {
  FaultSet faults;
  faults.add(Fault::kAbortCacheInsert);
  // 40 tokens: 2 full pages, both hits though nothing was ever written.
  EXPECT_EQ(CachedPagesAfterAnAbortedReservation(faults), 2);
}

}  // namespace
}  // namespace kvcanary::engine
