#pragma once
#include <cuda_runtime.h>

// The decode attention's online-softmax step per 32-key block, on exp: its scores carry no log2 e.
namespace tf::cuda {

// Two rows a thread, a row's lanes a quad: the tile's row maxima, the new running maxima and the old sums' factor.
__device__ __forceinline__ void softmax_rescale(float (&bmax)[2], float (&mrun)[2], float (&alpha)[2]) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    bmax[hr] = fmaxf(bmax[hr], __shfl_xor_sync(0xffffffffu, bmax[hr], 1));
    bmax[hr] = fmaxf(bmax[hr], __shfl_xor_sync(0xffffffffu, bmax[hr], 2));
    const float mn = fmaxf(mrun[hr], bmax[hr]);
    alpha[hr] = mn == -INFINITY ? 1.0f : expf(mrun[hr] - mn);
    mrun[hr] = mn;
  }
}

// P = exp(s - m) of a 32-key tile in place, and this thread's row sums in key order; masked scores (-inf) give +0.
__device__ __forceinline__ void softmax_exp(float (&s)[4][4], const float (&mrun)[2], float (&rs)[2]) {
  rs[0] = rs[1] = 0.0f;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[nt][e] = s[nt][e] == -INFINITY ? 0.0f : expf(s[nt][e] - mrun[e >> 1]);
      rs[e >> 1] = __fadd_rn(rs[e >> 1], s[nt][e]);
    }
}

}  // namespace tf::cuda
