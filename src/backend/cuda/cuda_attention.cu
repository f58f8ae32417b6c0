#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_ctl.cuh"
#include "backend/cuda/cuda_attention.h"

namespace tf::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ const float* kv_at(const PagedKv& kv, int seq, int64_t j, bool value) {
  const int32_t page = kv.page_table[int64_t(seq) * kv.max_pages + j / kv.page_size];
  return kv.base + int64_t(page) * kv.page_floats + kv.layer_offset + (value ? kv.page_size * kv.kv_row : 0) +
         (j % kv.page_size) * kv.kv_row;
}

__global__ void attention_kernel(const float* q, const int32_t* pos, const int32_t* row_seq, PagedKv kv,
                                 int64_t n_head, int64_t n_kv_head, int64_t hd, float scale, float* out) {
  extern __shared__ float scores[];
  __shared__ double red[kThreads];
  const int64_t r = blockIdx.x / n_head, h = blockIdx.x % n_head;
  int64_t kvh = h / (n_head / n_kv_head);
  if (TF_DCTL(142) && n_kv_head > 1) kvh = (kvh + 1) % n_kv_head;  // planted: wrong KV head
  const int seq = row_seq[r];
  int64_t n_keys = int64_t(pos[r]) + 1;
  if (TF_DCTL(141)) n_keys += 1;  // planted: one key past the causal limit
  const float* qr = q + (r * n_head + h) * hd;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < n_keys; j += kThreads) {
    const float* k = kv_at(kv, seq, j, false) + kvh * hd;
    float s = 0.0f;
    for (int64_t d = 0; d < hd; ++d) s = fmaf(qr[d], k[d], s);
    scores[j] = s * scale;
    mx = fmaxf(mx, scores[j]);
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
  for (int st = kThreads / 2; st > 0; st >>= 1) {  // fixed tree over threads, each summing keys j = t mod kThreads
    if (int(threadIdx.x) < st) red[threadIdx.x] += red[threadIdx.x + st];
    __syncthreads();
  }
  const float inv = float(1.0 / red[0]);
  for (int64_t d = threadIdx.x; d < hd; d += kThreads) {
    float o = 0.0f;
    for (int64_t j = 0; j < n_keys; ++j) o = fmaf(scores[j] * inv, kv_at(kv, seq, j, true)[kvh * hd + d], o);
    out[(r * n_head + h) * hd + d] = o;
  }
}

}  // namespace

void attention(const float* q, int64_t n_rows, const int32_t* pos, const int32_t* row_seq, const PagedKv& kv,
               int64_t n_head, int64_t n_kv_head, int64_t head_dim, float scale, int64_t max_keys, float* out) {
  upload_control();
  const size_t shared = size_t(max_keys + 1) * sizeof(float);
  if (shared > 48 * 1024)
    cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared));
  attention_kernel<<<unsigned(n_rows * n_head), kThreads, shared>>>(q, pos, row_seq, kv, n_head, n_kv_head, head_dim,
                                                                     scale, out);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA attention: ") + cudaGetErrorString(e));
}

}  // namespace tf::cuda
