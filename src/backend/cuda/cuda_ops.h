#pragma once
#include <cstdint>

// Elementwise and per-row CUDA kernels of the llama path; device pointers, no CUDA header needed by callers.
namespace tf::cuda {

// y = x / sqrt(mean(x^2) + eps) * w per row; the sum of squares in double with a fixed block-wide order.
void rmsnorm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y);
// out = silu(gate) * up.
void swiglu(const float* gate, const float* up, float* out, int64_t n);
// Rotates every head of every row in place with per-row cos/sin tables of n_rot/2 entries (NORM: adjacent pairs,
// NEOX: halves).
void rope(float* x, int64_t n_rows, int64_t row_stride, int64_t n_heads, int64_t head_dim, int64_t n_rot,
          const float* cos, const float* sin, bool neox);

}  // namespace tf::cuda
