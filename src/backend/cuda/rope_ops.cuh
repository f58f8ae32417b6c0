#pragma once
// RoPE's pairs and rotation and the KV slot of a row, shared by rope_store and the one-row Q|K|V group that does
// its work (each includer sets its own planted-control constant).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_ctl.cuh"
#include "backend/cuda/paged_kv.cuh"

namespace tf::cuda {
namespace {

// Pair i of a head (NORM: adjacent, NEOX: halves) and its rotation, as rope_store applies them.
__device__ __forceinline__ void rope_pair(int i, int half, bool neox, int& a, int& b) {
  a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
  if (TF_DCTL(131)) b = neox ? 2 * i + 1 : i + half;  // planted: pairs taken with the other pairing
}
__device__ __forceinline__ float2 rope_rotate(float x0, float x1, float c, float s) {
  if (TF_DCTL(132)) s = -s;  // planted: sin sign flipped
  return {__fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)), __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c))};
}
// Where row r's K lands in its sequence's page (V follows page_size rows later).
__device__ __forceinline__ float* kv_slot(const int32_t* pos, const int32_t* row_seq, int64_t r,
                                          const int32_t* page_table, int64_t max_pages, float* base,
                                          int64_t page_floats, int64_t layer_offset, int64_t page_size,
                                          int64_t kv_row) {
  const int64_t p = TF_DCTL(171) ? pos[r] + 1 : pos[r];  // planted: written one slot late
  return base + kv_offset(page_table, max_pages, row_seq[r], p, page_floats, layer_offset, page_size, kv_row, false);
}

}  // namespace
}  // namespace tf::cuda
