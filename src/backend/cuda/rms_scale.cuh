#pragma once
#include <cuda_runtime.h>

#include <cstdint>

// RMSNorm's row scale, shared by rmsnorm and the prompt products' stage so both normalise a row to the same bits.
namespace tf::cuda {

constexpr int kRmsThreads = 256;  // the block size the fixed tree below assumes

// 1 / sqrt(mean(x^2) + eps) of row xr, summed in a fixed order; all 256 threads call it (`lose`: a planted control).
__device__ __forceinline__ float rms_row_scale(const float* xr, int64_t n, float eps, bool lose) {
  __shared__ double part[kRmsThreads];
  double ss = 0;
  for (int64_t i = threadIdx.x; i < n; i += kRmsThreads) ss += double(xr[i]) * double(xr[i]);
  part[threadIdx.x] = ss;
  __syncthreads();
  for (int s = kRmsThreads / 2; s >= 32; s >>= 1) {
    if (int(threadIdx.x) < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x < 32) {  // the tree's last five steps by shuffles: lane t adds lane t + s, as part[t + s] above
    double v = part[threadIdx.x];
    for (int s = 16; s > 0; s >>= 1) v += __shfl_down_sync(0xffffffffu, v, s);
    if (threadIdx.x == 0) part[0] = v;
  }
  __syncthreads();
  const double total = lose ? 0.0 : part[0];
  return float(1.0 / sqrt(total / double(n) + double(eps)));
}

}  // namespace tf::cuda
