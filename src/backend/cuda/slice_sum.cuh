#pragma once
#include <cuda_runtime.h>

namespace tf::cuda {

// Element i of [slices][n] partials added in slice order: one sum for the reduce kernel and every fused consumer.
__device__ __forceinline__ float slice_sum(const float* __restrict__ partial, int slices, int64_t n, int64_t i,
                                           bool reverse = false) {
  float sum = 0.0f;
  for (int s0 = 0; s0 < slices; s0 += 8) {
    const int m = slices - s0 < 8 ? slices - s0 : 8;
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int s = reverse ? slices - 1 - (s0 + k) : s0 + k;
      v[k] = k < m ? __ldg(partial + int64_t(s) * n + i) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < 8; ++k)
      if (k < m) sum = s0 + k == 0 ? v[k] : __fadd_rn(sum, v[k]);
  }
  return sum;
}

}  // namespace tf::cuda
