#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

// The tensor-core instructions and the operand packings that the products, the attention and the probes share.
namespace tf::cuda {

// D = A B + C for one m16n8k16 tile: bf16 operands in the PTX fragment layout, f32 accumulators.
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// The same with C = 0 (no accumulator registers to clear first; +0 either way).
__device__ __forceinline__ void mma_m16n8k16_zero(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                  uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
}
// The same with fp16 operands (prompt rows: one mma a step).
__device__ __forceinline__ void mma_m16n8k16_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t half_pair(float a, float b) {  // a in the low half, as fragments hold it
  __half2 v = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t bf16_pair(float a, float b) {  // a in the low half, as fragments hold it
  __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ float bf16_lo(float x) {  // x - rn_bf16(x), exact in f32; 0 where x is not finite
  const float hi = __bfloat162float(__float2bfloat16_rn(x));
  return isfinite(hi) ? __fsub_rn(x, hi) : 0.0f;
}
// The same split for values known to round to a finite bf16 (|x| < 3.38e38): no check, the same bits.
__device__ __forceinline__ void bf16_split2_finite(float a, float b, uint32_t& hi, uint32_t& lo) {
  hi = bf16_pair(a, b);
  const float ha = __uint_as_float(hi << 16), hb = __uint_as_float(hi & 0xFFFF0000u);
  lo = bf16_pair(__fsub_rn(a, ha), __fsub_rn(b, hb));
}
// A pair of floats as bf16 hi and lo parts (x = hi + lo within 2^-16 |x|).
__device__ __forceinline__ void bf16_split2(float a, float b, uint32_t& hi, uint32_t& lo) {
  hi = bf16_pair(a, b), lo = bf16_pair(bf16_lo(a), bf16_lo(b));
}

}  // namespace tf::cuda
