#pragma once
#include <cstdint>

#include "backend/cuda/cuda_gemv.h"

// Elementwise and per-row CUDA kernels of the llama path; device pointers, no CUDA header needed by callers.
namespace tf::cuda {

// y = x / sqrt(mean(x^2) + eps) * w per row; the sum of squares in double with a fixed block-wide order.
// With xs/xsum (n a multiple of 64), y is also written split for tensor-core products (cuda_gemv.h SplitX).
void rmsnorm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y, void* xs = nullptr,
             float* xsum = nullptr);
// out = silu(gate) * up.
void swiglu(const float* gate, const float* up, float* out, int64_t n);

// x[r, i] += b[i]; x[i] += y[i] (each sum rounded once).
void add_bias(float* x, const float* b, int64_t n_rows, int64_t n);
void add_inplace(float* x, const float* y, int64_t n);
// out[r, i] = silu(gu[r, i]) * gu[r, n + i], gate|up rows of 2n; with parts (and xs) summed from those partials.
void swiglu_pairs(const float* gu, int64_t n_rows, int64_t n, float* out, void* xs = nullptr, float* xsum = nullptr,
                  const Partials& parts = {});
// K or V rows for rope_store: rows `stride` floats apart, or (slices > 0) their product's partials.
struct KvSource {
  const float* p = nullptr;
  int slices = 0;
  int64_t stride = 0;
};
// RoPE on Q's heads in place (per-row cos/sin tables of n_rot/2; NORM adjacent pairs, NEOX halves) and on K's, then
// each row's K and V written into its sequence's page at pos[r]; K and V as rows or as their products' partials.
void rope_store(float* q, int64_t q_stride, int64_t n_head, const KvSource& k, const KvSource& v, int64_t n_rows,
                int64_t head_dim, int64_t n_rot, const float* cos, const float* sin, bool neox, const int32_t* pos,
                const int32_t* row_seq, const int32_t* page_table, int64_t max_pages, float* base, int64_t page_floats,
                int64_t layer_offset, int64_t page_size, int64_t kv_row);
int64_t rope_store_row_launches();  // for tests: launches that took the row form (a block a row, float4 tasks)
// dst[r] = src[idx[r]] for rows of n floats.
void gather_rows(const float* src, const int32_t* idx, int64_t n_rows, int64_t n, float* dst);
// dst = src (bytes, 16-byte aligned) from a kernel that first idles `ns` nanoseconds: a late producer for the contract,
// so that a kernel launched next (PDL) reading its input ahead of griddepcontrol.wait would read the old bytes.
void copy_after(void* dst, const void* src, int64_t bytes, int64_t ns);

}  // namespace tf::cuda
