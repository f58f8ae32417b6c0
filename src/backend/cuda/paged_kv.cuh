#pragma once
#include <cuda_runtime.h>

#include "backend/cuda/cuda_attention.h"

namespace tf::cuda {

// Where position j of sequence `seq` keeps its key (or value) row in one layer of the page pool: the one formula
// that the KV store and both attention kernels share.
__device__ __forceinline__ int64_t kv_offset(const int32_t* page_table, int64_t max_pages, int seq, int64_t j,
                                             int64_t page_floats, int64_t layer_offset, int64_t page_size,
                                             int64_t kv_row, bool value) {
  // Positions and page sizes fit 32 bits (positions are int32): a 32-bit division, not a 64-bit division call.
  const int32_t jj = int32_t(j), ps = int32_t(page_size), pi = jj / ps;
  const int32_t page = page_table[int64_t(seq) * max_pages + pi];
  return int64_t(page) * page_floats + layer_offset + (value ? page_size * kv_row : 0) + int64_t(jj - pi * ps) * kv_row;
}
__device__ __forceinline__ const float* kv_row_of(const PagedKv& kv, int seq, int64_t j, bool value) {
  return kv.base + kv_offset(kv.page_table, kv.max_pages, seq, j, kv.page_floats, kv.layer_offset, kv.page_size,
                             kv.kv_row, value);
}

}  // namespace tf::cuda
