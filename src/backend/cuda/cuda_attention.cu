#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/cuda_ctl.cuh"
#include "backend/cuda/cuda_stream.cuh"
#include "backend/cuda/paged_kv.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHeadDim = 256;

// One block per (row, head): warps split keys by absolute position and partials add in warp order, so no row's bits
// depend on the other rows.
__global__ void __launch_bounds__(kThreads)
    attention_kernel(const float* q, int64_t q_stride, const int32_t* pos, const int32_t* row_seq, PagedKv kv,
                     int64_t n_head, int64_t n_kv_head, int hd, float scale, float* out) {
  grid_wait();
  extern __shared__ float scores[];
  __shared__ double red[kThreads];
  __shared__ float part[kWarps][kMaxHeadDim];
  const int64_t r = blockIdx.x / n_head, h = blockIdx.x % n_head;
  int64_t kvh = h / (n_head / n_kv_head);
  if (TF_DCTL(142) && n_kv_head > 1) kvh = (kvh + 1) % n_kv_head;  // planted: wrong KV head
  const int seq = row_seq[r];
  int64_t n_keys = int64_t(pos[r]) + 1;
  if (TF_DCTL(141)) n_keys += 1;  // planted: one key past the causal limit
  const float* qr = q + r * q_stride + h * hd;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int per_lane = hd / 32;  // hd is a multiple of 32, at most kMaxHeadDim
  float ql[kMaxHeadDim / 32];
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i) ql[i] = i < per_lane ? qr[lane + 32 * i] : 0.0f;
  float mx = -INFINITY;
  for (int64_t j = warp; j < n_keys; j += kWarps) {
    const float* k = kv_row_of(kv, seq, j, false) + kvh * hd;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxHeadDim / 32; ++i)
      if (i < per_lane) s = fmaf(ql[i], k[lane + 32 * i], s);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    s *= scale;
    if (lane == 0) scores[j] = s;
    mx = fmaxf(mx, s);
  }
  red[threadIdx.x] = mx;
  __syncthreads();
  for (int st = kThreads / 2; st > 0; st >>= 1) {
    if (int(threadIdx.x) < st) red[threadIdx.x] = fmax(red[threadIdx.x], red[threadIdx.x + st]);
    __syncthreads();
  }
  const float m = float(red[0]);
  __syncthreads();
  double sum = 0;
  for (int64_t j = threadIdx.x; j < n_keys; j += kThreads) {
    scores[j] = expf(scores[j] - m);
    sum += scores[j];
  }
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int st = kThreads / 2; st > 0; st >>= 1) {
    if (int(threadIdx.x) < st) red[threadIdx.x] += red[threadIdx.x + st];
    __syncthreads();
  }
  const float inv = float(1.0 / red[0]);
  float acc[kMaxHeadDim / 32];
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i) acc[i] = 0.0f;
  for (int64_t j = warp; j < n_keys; j += kWarps) {
    const float* v = kv_row_of(kv, seq, j, true) + kvh * hd;
    const float p = scores[j] * inv;
#pragma unroll
    for (int i = 0; i < kMaxHeadDim / 32; ++i)
      if (i < per_lane) acc[i] = fmaf(p, v[lane + 32 * i], acc[i]);
  }
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i)
    if (i < per_lane) part[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += kThreads) {
    float o = part[0][d];
    for (int w = 1; w < kWarps; ++w) o = __fadd_rn(o, part[w][d]);
    out[(r * n_head + h) * hd + d] = o;
  }
}

}  // namespace

void attention(const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos, const int32_t* row_seq,
               const PagedKv& kv, int64_t n_head, int64_t n_kv_head, int64_t head_dim, float scale, int64_t max_keys,
               float* out) {
  if (head_dim % 32 != 0 || head_dim > kMaxHeadDim)
    throw std::runtime_error("attention: head size must be a multiple of 32 up to 256");
  upload_control();
  const size_t shared = size_t(max_keys + 1) * sizeof(float);
  static size_t granted = 48 * 1024;
  if (shared > granted) {
    cuda_check(cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)),
               "attention: shared memory");
    granted = shared;
  }
  launch_k(attention_kernel, unsigned(n_rows * n_head), kThreads, shared, q, q_stride, pos, row_seq, kv, n_head,
           n_kv_head, int(head_dim), scale, out);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA attention: ") + cudaGetErrorString(e));
}

}  // namespace tf::cuda
