#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_gemv.h"

// Device side of the tensor-core layout (mma_pack.cpp): per format, a lane's 64-column load, its A fragment for one
// 16-column step as exact small integers in bf16, and the scale (and min) of one scale group of its rows.
namespace tf::cuda {

__device__ __forceinline__ float mma_f16(uint32_t bits) { return __half2float(__ushort_as_half(uint16_t(bits))); }
__device__ __forceinline__ uint32_t mma_word(const uint4& u, int i) {
  return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}
// 4- and 6-bit weights come in whole lines, once a decode product: evict-first leaves L2 to code, activations, KV.
__device__ __forceinline__ uint64_t l2_evict_first() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint4 ld_weights(const uint4* a) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(a), "l"(l2_evict_first()));
  return v;
}
__device__ __forceinline__ uint2 ld_weights(const uint2* a) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;"
               : "=r"(v.x), "=r"(v.y)
               : "l"(a), "l"(l2_evict_first()));
  return v;
}
// (w & mask) | 0x43004300 in one LOP3: 128 + q as bf16, so bf16_sub takes 128 + bias off exactly.
template <uint32_t kMask>
__device__ __forceinline__ uint32_t bf16_magic(uint32_t w) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(w), "n"(kMask), "n"(0x43004300u));
  return d;
}
// v | (h & mask) as one LOP3.
template <uint32_t kMask>
__device__ __forceinline__ uint32_t bf16_or_masked(uint32_t v, uint32_t h) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xF8;" : "=r"(d) : "r"(v), "r"(h), "n"(kMask));
  return d;
}
__device__ __forceinline__ uint32_t bf16_sub(uint32_t v, uint32_t bias2) {
  __nv_bfloat162 r =
      __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&v), *reinterpret_cast<const __nv_bfloat162*>(&bias2));
  return *reinterpret_cast<uint32_t*>(&r);
}
__device__ __forceinline__ float mma_ubyte_float(uint32_t word, int k) {  // uint8 byte k, exactly
  return __fsub_rn(__uint_as_float(__byte_perm(word, 0x4B000000u, 0x7540u | unsigned(k))), 8388608.0f);
}
__device__ __forceinline__ float mma_byte_float(uint32_t word, int k) {  // int8 byte k, exactly
  return __fsub_rn(__uint_as_float(__byte_perm(word ^ 0x80808080u, 0x4B000000u, 0x7540u | unsigned(k))), 8388736.0f);
}

struct MmaRaw4 {  // a lane's 64 columns: 16 bytes of nibbles (and Q6_K's 8 bytes of high bits)
  uint4 q;
  uint2 h;
};
struct MmaRaw8 {
  uint4 q[2];
};
struct MmaRaw16 {
  uint4 q[4];
};

template <int kType>
struct MmaF;

template <int kType, uint32_t kBias2>
struct MmaNibbles {  // Q4_0, Q4_1, Q4_K: step st is word st; pair i at bit 4i, its second element 16 bits higher
  using Raw = MmaRaw4;
  static constexpr int kQ = 16;
  static __device__ Raw load(const uint8_t* q, const uint8_t*, int64_t at) {
    return {ld_weights(reinterpret_cast<const uint4*>(q) + at), {}};
  }
  static __device__ void frag(const Raw& r, int st, uint32_t (&a)[4]) {
    const uint32_t w = mma_word(r.q, st);
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = bf16_sub(bf16_magic<0x000F000Fu>(w >> (4 * i)), kBias2);
  }
};

// bf16 pairs of the integer bias 128 + b: 128 is 0x4300, 136 is 0x4308, 160 is 0x4320.
template <>
struct MmaF<int(GgmlType::Q4_0)> : MmaNibbles<int(GgmlType::Q4_0), 0x43084308u> {
  static constexpr int kMeta = 4, kSpg = 2;
  static constexpr bool kMin = false, kScaled = true;
  static __device__ float2 group(const uint32_t* m, int j) { return {mma_f16(m[j >> 1] >> (16 * (j & 1))), 0.0f}; }
};
template <>
struct MmaF<int(GgmlType::Q4_1)> : MmaNibbles<int(GgmlType::Q4_1), 0x43004300u> {
  static constexpr int kMeta = 8, kSpg = 2;
  static constexpr bool kMin = true, kScaled = true;
  static __device__ float2 group(const uint32_t* m, int j) { return {mma_f16(m[j]), mma_f16(m[j] >> 16)}; }
};
template <>
struct MmaF<int(GgmlType::Q4_K)> : MmaNibbles<int(GgmlType::Q4_K), 0x43004300u> {
  static constexpr int kMeta = 5, kSpg = 2;  // d | dmin, 8 scale bytes, 8 min bytes
  static constexpr bool kMin = true, kScaled = true;
  static __device__ float2 group(const uint32_t* m, int j) {  // d*sc and -dmin*m, both exact in f32
    // The packed scale and min bytes are below 64, so each byte converts exactly through 2^23 + byte.
    const float sc = mma_ubyte_float(m[1 + (j >> 2)], j & 3), mn = mma_ubyte_float(m[3 + (j >> 2)], j & 3);
    return {__fmul_rn(mma_f16(m[0]), sc), -__fmul_rn(mma_f16(m[0] >> 16), mn)};
  }
};
template <>
struct MmaF<int(GgmlType::Q6_K)> {
  using Raw = MmaRaw4;
  static constexpr int kQ = 16, kMeta = 5, kSpg = 1;
  static constexpr bool kMin = false, kScaled = true;
  static __device__ Raw load(const uint8_t* q, const uint8_t* h, int64_t at) {
    return {ld_weights(reinterpret_cast<const uint4*>(q) + at), ld_weights(reinterpret_cast<const uint2*>(h) + at)};
  }
  static __device__ void frag(const Raw& r, int st, uint32_t (&a)[4]) {  // 6-bit u = q + 32: bias 160
    const uint32_t w = mma_word(r.q, st), hw = ((st >> 1) ? r.h.y : r.h.x) >> (2 * (st & 1));
#pragma unroll
    for (int i = 0; i < 4; ++i)
      a[i] = bf16_sub(bf16_or_masked<0x00300030u>(bf16_magic<0x000F000Fu>(w >> (4 * i)),
                                                   i == 0 ? hw << 4 : hw >> (4 * i - 4)),
                      0x43204320u);
  }
  static __device__ float2 group(const uint32_t* m, int j) {
    return {__fmul_rn(mma_f16(m[4]), float(int8_t((m[j >> 2] >> (8 * (j & 3))) & 0xFF))), 0.0f};
  }
};
template <>
struct MmaF<int(GgmlType::Q8_0)> {  // step st: bytes 8st..8st+7, pair i at bytes 2i, 2i+1
  using Raw = MmaRaw8;
  static constexpr int kQ = 32, kMeta = 4, kSpg = 2;
  static constexpr bool kMin = false, kScaled = true;
  static __device__ Raw load(const uint8_t* q, const uint8_t*, int64_t at) {
    const uint4* p = reinterpret_cast<const uint4*>(q) + 2 * at;
    return {{__ldg(p), __ldg(p + 1)}};  // each line serves two loads, so it must stay cached between them
  }
  static __device__ void frag(const Raw& r, int st, uint32_t (&a)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = mma_word(r.q[st >> 1], 2 * (st & 1) + (i >> 1));
      __nv_bfloat162 v = __floats2bfloat162_rn(mma_byte_float(w, 2 * (i & 1)), mma_byte_float(w, 2 * (i & 1) + 1));
      a[i] = *reinterpret_cast<uint32_t*>(&v);
    }
  }
  static __device__ float2 group(const uint32_t* m, int j) { return {mma_f16(m[j >> 1] >> (16 * (j & 1))), 0.0f}; }
};
template <>
struct MmaF<int(GgmlType::BF16)> {  // step st: one uint4 of four bf16 pairs, the fragment itself
  using Raw = MmaRaw16;
  static constexpr int kQ = 64, kMeta = 0, kSpg = 2;
  static constexpr bool kMin = false, kScaled = false;
  static __device__ Raw load(const uint8_t* q, const uint8_t*, int64_t at) {
    const uint4* p = reinterpret_cast<const uint4*>(q) + 4 * at;
    return {{__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3)}};  // lines shared by loads: plain caching
  }
  static __device__ void frag(const Raw& r, int st, uint32_t (&a)[4]) {
    a[0] = r.q[st].x, a[1] = r.q[st].y, a[2] = r.q[st].z, a[3] = r.q[st].w;
  }
  static __device__ float2 group(const uint32_t*, int) { return {1.0f, 0.0f}; }
};

}  // namespace tf::cuda
