#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "backend/ctl.h"
#include "backend/cuda/cuda_gemv.h"

namespace tf::cuda {
namespace {

void check(cudaError_t e, const char* op) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA ") + op + ": " + cudaGetErrorString(e));
}

constexpr int kRowsPerPass = 8;

// Planted controls exist only in the test build (TF_CTL=1); the production kernel has no such branch.
#if defined(TF_CTL) && TF_CTL
#define TF_DCTL(n) (ctl == (n))
#else
#define TF_DCTL(n) false
#endif

__device__ __forceinline__ float half_at(const uint8_t* p) {
  return __half2float(__ushort_as_half(uint16_t(p[0] | (p[1] << 8))));
}

// Lane part `p` (0..3) of block `b`: eight elements, decoded exactly in gguf-py's operation order (products and sums
// rounded separately, never fused), with their positions in the block. Four lanes share a block, so a warp reads
// eight consecutive blocks per step.
template <int kType>
__device__ __forceinline__ void decode_part(const uint8_t* row, int64_t b, int p, float* v, int* at) {
  if constexpr (kType == int(GgmlType::F32) || kType == int(GgmlType::F16) || kType == int(GgmlType::BF16)) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int64_t e = b * 32 + p * 8 + i;
      at[i] = p * 8 + i;
      if constexpr (kType == int(GgmlType::F32)) v[i] = reinterpret_cast<const float*>(row)[e];
      else if constexpr (kType == int(GgmlType::F16)) v[i] = half_at(row + e * 2);
      else v[i] = __uint_as_float(uint32_t(row[e * 2] | (row[e * 2 + 1] << 8)) << 16);
    }
  } else if constexpr (kType == int(GgmlType::Q8_0)) {
    const uint8_t* blk = row + b * 34;
    const float d = half_at(blk);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      at[i] = p * 8 + i;
      v[i] = __fmul_rn(float(int8_t(blk[2 + p * 8 + i])), d);
    }
  } else {
    // Q4_0 / Q4_1: bytes 4p..4p+3 hold elements 4p+i (low nibble) and 4p+i+16 (high nibble).
    constexpr bool kMin = kType == int(GgmlType::Q4_1);
    const uint8_t* blk = row + b * (kMin ? 20 : 18);
    const uint8_t* qs = blk + (kMin ? 4 : 2);
    const float d = half_at(blk), m = kMin ? half_at(blk + 2) : 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int byte = qs[4 * p + i];
      at[i] = 4 * p + i;
      at[4 + i] = 4 * p + i + 16;
      if constexpr (kMin) {
        v[i] = __fadd_rn(__fmul_rn(float(byte & 15), d), m);
        v[4 + i] = __fadd_rn(__fmul_rn(float(byte >> 4), d), m);
      } else {
        v[i] = __fmul_rn(float((byte & 15) - 8), d);
        v[4 + i] = __fmul_rn(float((byte >> 4) - 8), d);
      }
    }
  }
}

// One warp per output column; lane l takes part l%4 of blocks l/4, l/4+8, ... in order (one running sum per row and
// lane), then a fixed shuffle tree. Nothing in a row's arithmetic depends on how many rows share the launch.
template <int kType>
__global__ void gemv_kernel(const uint8_t* __restrict__ w, int64_t n_in, int64_t n_out, int64_t row_bytes,
                            const float* __restrict__ x, int n_rows, float* __restrict__ y, int ctl) {
  const int64_t o = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (o >= n_out) return;
  const uint8_t* row = w + o * row_bytes;
  const int64_t nb = n_in / 32;
  const int part = lane & 3;
  for (int r0 = 0; r0 < n_rows; r0 += kRowsPerPass) {
    const int nr = min(kRowsPerPass, n_rows - r0);
    float acc[kRowsPerPass];
#pragma unroll
    for (int r = 0; r < kRowsPerPass; ++r) acc[r] = 0.0f;
#pragma unroll 2
    for (int64_t b = lane >> 2; b < nb; b += 8) {
      float v[8];
      int at[8];
      decode_part<kType>(row, b, part, v, at);
#pragma unroll
      for (int r = 0; r < kRowsPerPass; ++r) {
        if (r >= nr) break;
        int rx = r0 + r;
        if (TF_DCTL(102) && r > 0 && b < 8) rx -= 1;  // planted: a row reads its neighbour's activations
        const float* xb = x + int64_t(rx) * n_in + b * 32;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          float xv = xb[at[i]];
          if (TF_DCTL(101) && !isfinite(xv)) xv = 0.0f;  // planted: non-finite activation read as 0
          acc[r] = fmaf(v[i], xv, acc[r]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerPass; ++r) {
      if (r >= nr) break;
      float t = acc[r];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) t += __shfl_xor_sync(0xffffffffu, t, off);
      if (lane == 0) y[int64_t(r0 + r) * n_out + o] = t;
    }
  }
}

int active_control() {
#if defined(TF_CTL) && TF_CTL
  return g_active_control;
#else
  return 0;
#endif
}

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

bool gemv_supports(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q4_0: case GgmlType::Q4_1:
    case GgmlType::Q8_0:
      return true;
    default:
      return false;
  }
}

void gemv(GgmlType type, const void* w, int64_t n_in, int64_t n_out, int64_t row_bytes, const float* x,
          int64_t n_rows, float* y) {
  if (!gemv_supports(type) || n_in % 32 != 0) throw std::runtime_error("gemv: unsupported format or row length");
  const int threads = 256;
  const unsigned blocks = unsigned((n_out * 32 + threads - 1) / threads);
  const auto* wb = static_cast<const uint8_t*>(w);
  const int ctl = active_control();
  switch (type) {
#define TF_GEMV_CASE(T) \
  case GgmlType::T: gemv_kernel<int(GgmlType::T)><<<blocks, threads>>>(wb, n_in, n_out, row_bytes, x, int(n_rows), y, ctl); break;
    TF_GEMV_CASE(F32)
    TF_GEMV_CASE(F16)
    TF_GEMV_CASE(BF16)
    TF_GEMV_CASE(Q4_0)
    TF_GEMV_CASE(Q4_1)
    TF_GEMV_CASE(Q8_0)
#undef TF_GEMV_CASE
    default: break;
  }
  check(cudaGetLastError(), "gemv launch");
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}
void device_free(void* p) { check(cudaFree(p), "cudaFree"); }
void copy_to_device(void* dst, const void* src, size_t n) { check(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "copy to device"); }
void copy_to_host(void* dst, const void* src, size_t n) { check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "copy to host"); }
void synchronize() { check(cudaDeviceSynchronize(), "synchronize"); }

}  // namespace tf::cuda
