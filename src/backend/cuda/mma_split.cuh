#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/mma_ops.cuh"

// One 32-column group of an activation row split for the tensor-core products: bf16 hi + lo B fragments of both
// 16-column steps and the group's sum in column order. Every kernel that produces split activations calls this, so
// a product sees the same bits whichever kernel made them.
namespace tf::cuda {

// xs: [rows][n_in/16 steps][4 lanes] uint4 (hi(2t,2t+1), hi(2t+8,2t+9), lo, lo); xsum: [rows][n_in/32].
__device__ __forceinline__ void split_group(const float (&v)[32], int64_t row, int64_t gi, int64_t n_in, uint4* xs,
                                            float* xsum) {
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < 32; ++k) s = __fadd_rn(s, v[k]);
  xsum[row * (n_in / 32) + gi] = s;
#pragma unroll
  for (int st = 0; st < 2; ++st)
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const float* a = v + 16 * st + 2 * t;
      xs[((row * (n_in / 16)) + gi * 2 + st) * 4 + t] =
          make_uint4(bf16_pair(a[0], a[1]), bf16_pair(a[8], a[9]), bf16_pair(bf16_lo(a[0]), bf16_lo(a[1])),
                     bf16_pair(bf16_lo(a[8]), bf16_lo(a[9])));
    }
}

// The same split by a whole warp, lane k holding column k of the group: identical bits (the same per-element steps,
// the sum still in column order), but each lane converts one value instead of one thread converting 32.
__device__ __forceinline__ void split_group_warp(float v, int64_t row, int64_t gi, int64_t n_in, uint4* xs,
                                                 float* xsum) {
  const int lane = threadIdx.x & 31;
  const uint32_t both = bf16_pair(v, bf16_lo(v));  // this column's hi (low half) and lo (high half)
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < 32; ++k) s = __fadd_rn(s, __shfl_sync(0xffffffffu, v, k));
  // Lane st*4 + t (st: step, t: fragment lane) gathers columns 16st + 2t + {0, 1, 8, 9}.
  const int st = (lane >> 2) & 1, t = lane & 3, c0 = 16 * st + 2 * t;
  const uint32_t a = __shfl_sync(0xffffffffu, both, c0), b = __shfl_sync(0xffffffffu, both, c0 + 1),
                 c = __shfl_sync(0xffffffffu, both, c0 + 8), d = __shfl_sync(0xffffffffu, both, c0 + 9);
  if (lane == 0) xsum[row * (n_in / 32) + gi] = s;
  if (lane < 8)
    xs[((row * (n_in / 16)) + gi * 2 + st) * 4 + t] =
        make_uint4((a & 0xFFFFu) | (b << 16), (c & 0xFFFFu) | (d << 16), (a >> 16) | (b & 0xFFFF0000u),
                   (c >> 16) | (d & 0xFFFF0000u));
}

}  // namespace tf::cuda
