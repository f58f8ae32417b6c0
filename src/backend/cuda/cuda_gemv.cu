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


// Lane part `p` (0..3) of block `b`: eight elements, decoded exactly in gguf-py's operation order (products and sums
// rounded separately, never fused), with wide aligned loads. `first` receives the block positions of the two runs of
// four elements the part covers (elements first[0]..+3 and first[1]..+3).
template <int kType>
__device__ __forceinline__ void decode_part(const uint8_t* row, int64_t b, int p, float* v, int* first) {
  if constexpr (kType == int(GgmlType::F32)) {
    const float4* q = reinterpret_cast<const float4*>(row) + (b * 32 + p * 8) / 4;
    const float4 a = q[0], c = q[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = c.x, v[5] = c.y, v[6] = c.z, v[7] = c.w;
    first[0] = p * 8, first[1] = p * 8 + 4;
  } else if constexpr (kType == int(GgmlType::F16) || kType == int(GgmlType::BF16)) {
    const uint4 u = *reinterpret_cast<const uint4*>(row + (b * 32 + p * 8) * 2);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (kType == int(GgmlType::F16)) {
        v[2 * i] = __half2float(__ushort_as_half(uint16_t(w[i] & 0xFFFF)));
        v[2 * i + 1] = __half2float(__ushort_as_half(uint16_t(w[i] >> 16)));
      } else {
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
      }
    }
    first[0] = p * 8, first[1] = p * 8 + 4;
  } else if constexpr (kType == int(GgmlType::Q8_0)) {
    const uint8_t* blk = row + b * 34;  // 2-byte aligned
    const float d = __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(blk)));
    const uint16_t* q = reinterpret_cast<const uint16_t*>(blk + 2 + p * 8);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint16_t two = q[i];
      v[2 * i] = __fmul_rn(float(int8_t(two & 0xFF)), d);
      v[2 * i + 1] = __fmul_rn(float(int8_t(two >> 8)), d);
    }
    first[0] = p * 8, first[1] = p * 8 + 4;
  } else {
    // Q4_0 / Q4_1: bytes 4p..4p+3 hold elements 4p+i (low nibble) and 4p+i+16 (high nibble).
    constexpr bool kMin = kType == int(GgmlType::Q4_1);
    const uint8_t* blk = row + b * (kMin ? 20 : 18);
    uint32_t bytes;
    float d, m = 0.0f;
    if constexpr (kMin) {  // 20-byte blocks: 4-byte aligned
      const uint32_t dm = *reinterpret_cast<const uint32_t*>(blk);
      d = __half2float(__ushort_as_half(uint16_t(dm & 0xFFFF)));
      m = __half2float(__ushort_as_half(uint16_t(dm >> 16)));
      bytes = reinterpret_cast<const uint32_t*>(blk + 4)[p];
    } else {  // 18-byte blocks: 2-byte aligned
      d = __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(blk)));
      const uint16_t* q = reinterpret_cast<const uint16_t*>(blk + 2 + 4 * p);
      bytes = uint32_t(q[0]) | (uint32_t(q[1]) << 16);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int byte = int((bytes >> (8 * i)) & 0xFF);
      if constexpr (kMin) {
        v[i] = __fadd_rn(__fmul_rn(float(byte & 15), d), m);
        v[4 + i] = __fadd_rn(__fmul_rn(float(byte >> 4), d), m);
      } else {
        v[i] = __fmul_rn(float((byte & 15) - 8), d);
        v[4 + i] = __fmul_rn(float((byte >> 4) - 8), d);
      }
    }
    first[0] = 4 * p, first[1] = 4 * p + 16;
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
      int first[2];
      decode_part<kType>(row, b, part, v, first);
#pragma unroll
      for (int r = 0; r < kRowsPerPass; ++r) {
        if (r >= nr) break;
        int rx = r0 + r;
        if (TF_DCTL(102) && r > 0 && b < 8) rx -= 1;  // planted: a row reads its neighbour's activations
        const float* xb = x + int64_t(rx) * n_in + b * 32;
        const float4 lo = *reinterpret_cast<const float4*>(xb + first[0]);
        const float4 hi = *reinterpret_cast<const float4*>(xb + first[1]);
        float xv[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          if (TF_DCTL(101) && !isfinite(xv[i])) xv[i] = 0.0f;  // planted: non-finite activation read as 0
          acc[r] = fmaf(v[i], xv[i], acc[r]);
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
  // Wide loads need 16-byte aligned activation rows and 4-byte aligned Q4_1 / 2-byte aligned Q4_0, Q8_0 blocks.
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0 || (row_bytes % 4 != 0 && type == GgmlType::Q4_1))
    throw std::runtime_error("gemv: misaligned weights or activations");
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
