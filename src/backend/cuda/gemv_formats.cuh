#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_gemv.h"
#include "backend/cuda/cuda_stream.cuh"

// Weight kernels over the tiled layout of cuda_gemv.h: a unit (block) is kC chunks; element e of element chunk k is
// decoded with the codec's own roundings and multiplies input column unit_base + x_off(k, e), in runs of four.
namespace tf::cuda {

#if defined(TF_CTL) && TF_CTL
#define TF_GCTL(n) (ctl == (n))
#else
#define TF_GCTL(n) false
#endif

// Exact small integer to float without the quarter-rate converter: 2^23 + q read as a float, minus 2^23 + bias.
__device__ __forceinline__ float small_int(uint32_t q, float bias) {
  return __fsub_rn(__uint_as_float(0x4B000000u | q), 8388608.0f + bias);
}
__device__ __forceinline__ float f16v(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint32_t byte_of(const uint4& u, int i) {
  const uint32_t w = i < 4 ? u.x : i < 8 ? u.y : i < 12 ? u.z : u.w;
  return (w >> (8 * (i & 3))) & 0xFF;
}

// Byte k of a word as an exact float minus bias: one byte permute builds 2^23 + byte, one add removes 2^23 + bias.
__device__ __forceinline__ float byte_float(uint32_t word, int k, float bias) {
  return __fsub_rn(__uint_as_float(__byte_perm(word, 0x4B000000u, 0x7540u | unsigned(k))), 8388608.0f + bias);
}
__device__ __forceinline__ uint32_t word_of(const uint4& u, int i) {
  return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}

struct NoScale {};

template <int kType>
struct Fmt;

template <>
struct Fmt<int(GgmlType::F32)> {
  static constexpr int kC = 8, kUnit = 32, kElemChunks = 8, kChunkElems = 4, kScaleBytes = 0;
  using Scale = NoScale;
  static __device__ Scale scale(const uint8_t*) { return {}; }
  static __device__ int x_off(int k, int e) { return 4 * k + e; }
  static __device__ void decode(const uint4* c, Scale, int k, float* v) {
    v[0] = __uint_as_float(c[k].x), v[1] = __uint_as_float(c[k].y), v[2] = __uint_as_float(c[k].z),
    v[3] = __uint_as_float(c[k].w);
  }
};

template <int kT>
struct Fmt16 {  // F16 and BF16
  static constexpr int kC = 4, kUnit = 32, kElemChunks = 4, kChunkElems = 8, kScaleBytes = 0;
  using Scale = NoScale;
  static __device__ Scale scale(const uint8_t*) { return {}; }
  static __device__ int x_off(int k, int e) { return 8 * k + e; }
  static __device__ void decode(const uint4* c, Scale, int k, float* v) {
    const uint32_t w[4] = {c[k].x, c[k].y, c[k].z, c[k].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (kT == int(GgmlType::F16)) {
        v[2 * i] = f16v(uint16_t(w[i] & 0xFFFF)), v[2 * i + 1] = f16v(uint16_t(w[i] >> 16));
      } else {
        v[2 * i] = __uint_as_float(w[i] << 16), v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
      }
    }
  }
};
template <>
struct Fmt<int(GgmlType::F16)> : Fmt16<int(GgmlType::F16)> {};
template <>
struct Fmt<int(GgmlType::BF16)> : Fmt16<int(GgmlType::BF16)> {};

template <>
struct Fmt<int(GgmlType::Q8_0)> {  // chunks: the block's 32 int8; scale: its f16 d
  static constexpr int kC = 2, kUnit = 32, kElemChunks = 2, kChunkElems = 16, kScaleBytes = 2;
  using Scale = float;
  static __device__ Scale scale(const uint8_t* s) { return f16v(*reinterpret_cast<const uint16_t*>(s)); }
  static __device__ int x_off(int k, int e) { return 16 * k + e; }
  static __device__ void decode(const uint4* c, Scale d, int k, float* v) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = word_of(c[k], i) ^ 0x80808080u;  // int8 + 128 as unsigned bytes
#pragma unroll
      for (int b = 0; b < 4; ++b) v[4 * i + b] = __fmul_rn(byte_float(w, b, 128.0f), d);
    }
  }
};

template <int kT>
struct Fmt4 {  // Q4_0 and Q4_1: the block's 16 nibble bytes (low: elements 0-15, high: 16-31); scale d (and m)
  static constexpr bool kMin = kT == int(GgmlType::Q4_1);
  static constexpr int kC = 1, kUnit = 32, kElemChunks = 1, kChunkElems = 32, kScaleBytes = kMin ? 4 : 2;
  using Scale = float2;
  static __device__ Scale scale(const uint8_t* s) {
    if constexpr (kMin) {
      const uint32_t dm = *reinterpret_cast<const uint32_t*>(s);
      return {f16v(uint16_t(dm & 0xFFFF)), f16v(uint16_t(dm >> 16))};
    } else {
      return {f16v(*reinterpret_cast<const uint16_t*>(s)), 0.0f};
    }
  }
  static __device__ int x_off(int, int e) { return e; }
  static __device__ void decode(const uint4* c, Scale dm, int, float* v) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t lo = word_of(c[0], i) & 0x0F0F0F0Fu, hi = (word_of(c[0], i) >> 4) & 0x0F0F0F0Fu;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        if constexpr (kMin) {  // q*d is exact (4 + 11 bits), so the fused form rounds once, as the codec does
          v[4 * i + b] = fmaf(byte_float(lo, b, 0.0f), dm.x, dm.y);
          v[16 + 4 * i + b] = fmaf(byte_float(hi, b, 0.0f), dm.x, dm.y);
        } else {
          v[4 * i + b] = __fmul_rn(byte_float(lo, b, 8.0f), dm.x);
          v[16 + 4 * i + b] = __fmul_rn(byte_float(hi, b, 8.0f), dm.x);
        }
      }
    }
  }
};
template <>
struct Fmt<int(GgmlType::Q4_0)> : Fmt4<int(GgmlType::Q4_0)> {};
template <>
struct Fmt<int(GgmlType::Q4_1)> : Fmt4<int(GgmlType::Q4_1)> {};

template <>
struct Fmt<int(GgmlType::Q4_K)> {
  // Chunk 0: d, dmin and the 12 scale bytes; chunk 1 + k: qs bytes 16k.. = elements 16h+i of sub-blocks 2j (low
  // nibbles) and 2j+1 (high), j = k/2, h = k%2.
  static constexpr int kC = 9, kUnit = 256, kElemChunks = 8, kChunkElems = 32, kScaleBytes = 0;
  using Scale = NoScale;
  static __device__ Scale scale(const uint8_t*) { return {}; }
  static __device__ int x_off(int k, int e) { return 64 * (k >> 1) + 16 * (k & 1) + 32 * (e >> 4) + (e & 15); }
  static __device__ void decode(const uint4* c, Scale, int k, float* v) {
    const float d = f16v(uint16_t(c[0].x & 0xFFFF)), dmin = f16v(uint16_t(c[0].x >> 16));
    const uint4 sc4 = make_uint4(c[0].y, c[0].z, c[0].w, 0);
    float dd[2], mm[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int s = 2 * (k >> 1) + half;
      uint32_t sc, mn;
      if (s < 4) {
        sc = byte_of(sc4, s) & 63, mn = byte_of(sc4, s + 4) & 63;
      } else {
        sc = (byte_of(sc4, s + 4) & 15) | ((byte_of(sc4, s - 4) >> 6) << 4);
        mn = (byte_of(sc4, s + 4) >> 4) | ((byte_of(sc4, s) >> 6) << 4);
      }
      dd[half] = __fmul_rn(d, small_int(sc, 0.0f)), mm[half] = __fmul_rn(dmin, small_int(mn, 0.0f));
    }
    const uint4 q = c[1 + k];
    // dd (11 + 6 bits) times a nibble is exact, so dd*q - mm in one fused step rounds exactly as the codec's two.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t lo = word_of(q, i) & 0x0F0F0F0Fu, hi = (word_of(q, i) >> 4) & 0x0F0F0F0Fu;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        v[4 * i + b] = fmaf(dd[0], byte_float(lo, b, 0.0f), -mm[0]);
        v[16 + 4 * i + b] = fmaf(dd[1], byte_float(hi, b, 0.0f), -mm[1]);
      }
    }
  }
};

template <>
struct Fmt<int(GgmlType::Q6_K)> {
  // Chunks 0-7: ql, 8-11: qh, 12: the 16 int8 scales; scale: the f16 d. Element chunk k = ql bytes 16k.. with
  // n = k/4, a = (k/2)%2, h = k%2: elements 128n + 32g + 16h + i for g = a (low nibbles) and g = a + 2 (high).
  static constexpr int kC = 13, kUnit = 256, kElemChunks = 8, kChunkElems = 32, kScaleBytes = 2;
  using Scale = float;
  static __device__ Scale scale(const uint8_t* s) { return f16v(*reinterpret_cast<const uint16_t*>(s)); }
  static __device__ int x_off(int k, int e) {
    return 128 * (k >> 2) + 32 * ((k >> 1) & 1) + 16 * (k & 1) + 64 * (e >> 4) + (e & 15);
  }
  static __device__ void decode(const uint4* c, Scale d, int k, float* v) {
    const int n = k >> 2, a = (k >> 1) & 1, h = k & 1;
    const uint4 ql = c[k], qh = c[8 + 2 * n + h];
    const float ds0 = __fmul_rn(d, float(int8_t(byte_of(c[12], 8 * n + 2 * a + h))));
    const float ds1 = __fmul_rn(d, float(int8_t(byte_of(c[12], 8 * n + 2 * (a + 2) + h))));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t l = word_of(ql, i), h2 = word_of(qh, i) >> (2 * a);
      const uint32_t lo = (l & 0x0F0F0F0Fu) | ((h2 & 0x03030303u) << 4);
      const uint32_t hi = ((l >> 4) & 0x0F0F0F0Fu) | (((h2 >> 4) & 0x03030303u) << 4);
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        v[4 * i + b] = __fmul_rn(ds0, byte_float(lo, b, 32.0f));
        v[16 + 4 * i + b] = __fmul_rn(ds1, byte_float(hi, b, 32.0f));
      }
    }
  }
};

// A block per tile, a warp per slice of units, a lane per column, two running sums per row, slices added in order: R
// rows share the decoded weights, and no row's arithmetic depends on R or on the other rows.
template <int kType, int R>
__global__ void __launch_bounds__(512)
    gemv_kernel(DeviceMatrix w, const float* __restrict__ x, float* y, const float* residual, int ctl) {
  grid_wait();
  using F = Fmt<kType>;
  extern __shared__ float part[];  // [S][R][32]
  const int lane = threadIdx.x & 31, slice = threadIdx.x >> 5, S = blockDim.x >> 5;
  const int64_t tile = blockIdx.x, n_in = w.n_in;
  const uint4* qt = reinterpret_cast<const uint4*>(w.q) + tile * w.units * F::kC * 32 + lane;
  const uint8_t* st = w.s + (tile * w.units * 32 + lane) * F::kScaleBytes;
  float acc[R][2];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = 0.0f;
    // Small units unrolled so the next units' loads are in flight while this one is decoded.
#pragma unroll(F::kC <= 2 ? 4 : 1)
  for (int64_t u = slice; u < w.units; u += S) {
    uint4 c[F::kC];
#pragma unroll
    for (int k = 0; k < F::kC; ++k) c[k] = qt[(u * F::kC + k) * 32];
    const typename F::Scale sc = F::scale(st + u * 32 * F::kScaleBytes);
    const int64_t ubase = u * F::kUnit;
#pragma unroll
    for (int k = 0; k < F::kElemChunks; ++k) {
      float v[F::kChunkElems];
      F::decode(c, sc, k, v);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        int rx = r;
        if (TF_GCTL(102) && r > 0 && u < 2) rx -= 1;  // planted: a row reads its neighbour's activations
        const float* xr = x + int64_t(rx) * n_in + ubase;
#pragma unroll
        for (int g = 0; g < F::kChunkElems / 4; ++g) {
          const float4 xv4 = __ldg(reinterpret_cast<const float4*>(xr + F::x_off(k, 4 * g)));
          float xv[4] = {xv4.x, xv4.y, xv4.z, xv4.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            if (TF_GCTL(101) && !isfinite(xv[i])) xv[i] = 0.0f;  // planted: non-finite activation read as 0
            acc[r][i & 1] = fmaf(v[4 * g + i], xv[i], acc[r][i & 1]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) part[(slice * R + r) * 32 + lane] = __fadd_rn(acc[r][0], acc[r][1]);
  __syncthreads();
  for (int i = threadIdx.x; i < R * 32; i += blockDim.x) {
    const int r = i >> 5, l = i & 31;
    float sum = part[r * 32 + l];
    for (int s2 = 1; s2 < S; ++s2) sum = __fadd_rn(sum, part[(s2 * R + r) * 32 + l]);
    const int64_t o = tile * 32 + l;
    const int64_t at = int64_t(r) * w.n_out + o;
    if (o < w.n_out) y[at] = residual ? __fadd_rn(residual[at], sum) : sum;
  }
}

// Token rows decoded exactly as the GEMV reads them: one thread per (row, unit, element chunk).
template <int kType>
__global__ void embedding_kernel(DeviceMatrix w, const int32_t* __restrict__ ids, float* __restrict__ out, int ctl) {
  grid_wait();
  using F = Fmt<kType>;
  const int64_t r = blockIdx.y;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= w.units * F::kElemChunks) return;
  const int64_t u = t / F::kElemChunks;
  const int k = int(t % F::kElemChunks);
  const int64_t id = TF_GCTL(151) ? ids[r] + 1 : ids[r];  // planted: the next token's row
  const int64_t tile = id / 32, lane = id % 32;
  const uint4* qt = reinterpret_cast<const uint4*>(w.q) + ((tile * w.units + u) * F::kC) * 32 + lane;
  uint4 c[F::kC];
#pragma unroll
  for (int j = 0; j < F::kC; ++j) c[j] = qt[j * 32];
  float v[F::kChunkElems];
  F::decode(c, F::scale(w.s + ((tile * w.units + u) * 32 + lane) * F::kScaleBytes), k, v);
  if (TF_GCTL(152)) v[0] = 0.0f;  // planted: a lost element
  float* o = out + r * w.n_in + u * F::kUnit;
#pragma unroll
  for (int e = 0; e < F::kChunkElems; ++e) o[F::x_off(k, e)] = v[e];
}

// Rows in passes of 8, then 4, 2, 1: the pass size changes how often weights are decoded, never a row's sums.
template <int kType>
void launch_weight_kernels(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual,
                           const int32_t* ids, float* emb_out, int ctl) {
  if (ids) {
    const int64_t tasks = w.units * Fmt<kType>::kElemChunks;
    launch_k(embedding_kernel<kType>, dim3(unsigned((tasks + 127) / 128), unsigned(n_rows)), 128, 0, w, ids, emb_out,
             ctl);
    return;
  }
  const unsigned tiles = unsigned((w.n_out + 31) / 32), threads = unsigned(32 * w.slices);
  auto pass = [&](auto rows_tag, int64_t r) {
    constexpr int kR = decltype(rows_tag)::value;
    launch_k(gemv_kernel<kType, kR>, tiles, threads, size_t(w.slices * kR * 32) * sizeof(float), w, x + r * w.n_in,
             y + r * w.n_out, residual ? residual + r * w.n_out : nullptr, ctl);
  };
  int64_t r = 0;
  for (; r + 8 <= n_rows; r += 8) pass(std::integral_constant<int, 8>{}, r);
  if (n_rows - r >= 4) pass(std::integral_constant<int, 4>{}, r), r += 4;
  if (n_rows - r >= 2) pass(std::integral_constant<int, 2>{}, r), r += 2;
  if (n_rows - r >= 1) pass(std::integral_constant<int, 1>{}, r);
}

}  // namespace tf::cuda
