#pragma once
#include <cstddef>
#include <cstdint>

// The keyed sampler's device half: per logits row, everything the host needs to sample, so only a fixed number of
// candidates leaves the GPU (the cut never depends on the batch).
namespace tf::cuda {

constexpr int kCandidates = 256;
constexpr int64_t kMaxSampledVocab = 200 * 4096;  // the merge stages 1 KB per 4096-logit chunk in shared memory

struct SampleRow {         // host-packed, one per logits row
  double temperature = 0;  // <= 0: greedy only
  uint64_t seed = 0;
  int64_t pos = 0;         // absolute position of the token being drawn
  int32_t candidates = 1;  // 0: greedy without logprobs, only the argmax and the NaN flag are made
};

struct RowCandidatesDev {
  int32_t greedy = 0;  // argmax, lowest id on ties
  int32_t gumbel = 0;  // argmax of logit/T + gumbel(seed, pos, v) over the whole vocabulary
  float gumbel_logit = 0;
  int32_t n = 0;                // candidates written (min(kCandidates, n_vocab))
  double lse = 0;               // log-sum-exp of the logits (temperature 1), for logprobs
  double max_t = 0, sum_t = 0;  // max of logit/T and sum of exp(logit/T - max_t) over the vocabulary
  int32_t nan = 0;              // a NaN among the row's logits (either sign, which the candidates alone would miss)
  float logit[kCandidates];     // the kCandidates largest (logit desc, id asc), in id order
  int32_t id[kCandidates];
};

// Device scratch that candidates() needs for n_rows rows of n_vocab logits.
size_t candidates_scratch_bytes(int64_t n_rows, int64_t n_vocab);

// logits [n_rows, n_vocab], params [n_rows], out [n_rows], scratch: device memory.
void candidates(const float* logits, int64_t n_rows, int64_t n_vocab, const SampleRow* params, RowCandidatesDev* out,
                void* scratch);

}  // namespace tf::cuda
