// A request as the engine thread sees it: tokens, sampling, pages, state.
//
// Not thread-safe; owned by the engine thread.
#ifndef KVCANARY_ENGINE_CORE_SEQUENCE_H_
#define KVCANARY_ENGINE_CORE_SEQUENCE_H_

#include <string>
#include <vector>

#include "common/ids.h"
#include "common/page_stamp.h"
#include "engine/core/request_state.h"
#include "engine/model/logprobs.h"
#include "engine/model/sampler.h"
#include "kernels/paged_attention.h"

namespace kvcanary::engine {

// Where a sequence's prefill and decode happen.
enum class SequenceRole {
  kLocal,          // both here (single process)
  kPrefillOnly,    // prefill node: prefill, sample the first token, then hold
                   // the pages in kTransferring until FinishTransfer()
  kRemotePrefill,  // decode node: reserve pages, wait in kTransferring for
                   // the prefill node's K/V (InstallTransferredKv), decode
};

struct Sequence {
  Sequence(RequestId id, TenantId tenant, std::vector<int> prompt,
           const SamplingParams& sampling)
      : id(id),
        tenant(tenant),
        prompt(std::move(prompt)),
        sampling(sampling),
        sampler(sampling) {}

  RequestId id;
  TenantId tenant;
  std::string cache_salt;  // the body's cache_salt; "" none
  SequenceRole role = SequenceRole::kLocal;
  std::vector<int> prompt;  // BOS first
  std::vector<int> output;  // generated tokens, end token excluded
  // With sampling.logprobs >= 0: output[i]'s log-probabilities, where this
  // engine computed them (a decode node's first token came with the K/V;
  // its entry here has token -1).
  std::vector<TokenLogprobs> output_logprobs;
  // With sampling.prompt_logprobs: prompt[i + 1]'s, once prefilled.
  std::vector<TokenLogprobs> prompt_logprobs;
  SamplingParams sampling;
  Sampler sampler;
  RequestState state;
  // Block table: pages holding tokens [i * page_tokens, (i+1) * page_tokens).
  std::vector<kernels::PageRef> block_table;
  // block_table[0, shared_pages) belong to the prefix cache (a hit at
  // admission, or pages this request published): unref'd, not freed.
  int shared_pages = 0;
  // Prompt tokens whose K/V came from the prefix cache at admission (hits,
  // not pages this request published later): usage's cached_tokens.
  int cached_tokens = 0;
  // Tokens whose K/V are in the pages: positions [0, num_computed).
  int num_computed = 0;
  // Every watermark violation seen while serving this request (any mode but
  // kOff), attributed to the page's writer.
  std::vector<WatermarkViolation> violations;

  int num_tokens() const {
    return static_cast<int>(prompt.size() + output.size());
  }
  int last_token() const {
    return output.empty() ? prompt.back() : output.back();
  }
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_CORE_SEQUENCE_H_
