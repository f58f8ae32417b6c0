#pragma once
#include <cuda_runtime.h>

// The decode attention's online-softmax step per key block, and the flushed 2^x the prompt kernels' steps share.
namespace tf::cuda {

// 2^x flushed to +0 below 2^-126, for P only: fp16 P (values scaled by at most 2^15) and row sums of at least 1
// absorb exp2f's subnormal results; the rescaling factor keeps exp2f, as o times it need not be absorbed.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Two rows a thread, a row's lanes a quad: the tile's row maxima, the new running maxima and the old sums' factor.
// kExp2: the scores already carry log2(e), so exp2 is exp.
template <bool kExp2>
__device__ __forceinline__ void softmax_rescale(float (&bmax)[2], float (&mrun)[2], float (&alpha)[2]) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    bmax[hr] = fmaxf(bmax[hr], __shfl_xor_sync(0xffffffffu, bmax[hr], 1));
    bmax[hr] = fmaxf(bmax[hr], __shfl_xor_sync(0xffffffffu, bmax[hr], 2));
    const float mn = fmaxf(mrun[hr], bmax[hr]);
    alpha[hr] = mn == -INFINITY ? 1.0f : (kExp2 ? exp2f(mrun[hr] - mn) : expf(mrun[hr] - mn));
    mrun[hr] = mn;
  }
}

// P = exp(s - m) of a 32-key tile in place, and this thread's row sums in key order; masked scores (-inf) give +0.
template <bool kExp2>
__device__ __forceinline__ void softmax_exp(float (&s)[4][4], const float (&mrun)[2], float (&rs)[2]) {
  rs[0] = rs[1] = 0.0f;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[nt][e] =
          kExp2 ? exp2_ftz(s[nt][e] - mrun[e >> 1]) : (s[nt][e] == -INFINITY ? 0.0f : expf(s[nt][e] - mrun[e >> 1]));
      rs[e >> 1] = __fadd_rn(rs[e >> 1], s[nt][e]);
    }
}

}  // namespace tf::cuda
