#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/f16_image_gemm.cuh"
#include "backend/cuda/f16_prompt.cuh"
#include "backend/cuda/wgmma_ops.cuh"

// The wide prompt image product: x as wgmma's A, the image as B, so a unit of x serves kW outputs instead of 128.
namespace tf::cuda {

constexpr int kWideThreads = 384;  // one thread of warpgroup 0 brings the units; 1 and 2 take 64 rows each
__host__ __device__ constexpr int wide_stage_bytes(int w) { return f16_unit_bytes(128) + w * 128; }
// As many stages as fit beside the row exponents under the 227 KiB a block may take.
__host__ __device__ constexpr int wide_stages(int w) { return (227 * 1024 - 1024) / (wide_stage_bytes(w) + 16); }
__host__ __device__ constexpr int wide_smem_bytes(int w) { return wide_stages(w) * (wide_stage_bytes(w) + 16); }

// y (+ residual) of one warp's 16 rows x kW outputs: c[4j + k] is row g + 8 (k >> 1), output 8j + 2t + (k & 1).
template <int kW>
__device__ __forceinline__ void wide_store(const F16Args& A, float (&c)[kW / 2], const int* row_e, int64_t row0,
                                           int64_t out0, int g, int t, [[maybe_unused]] int ctl) {
  const DeviceMatrix& w = A.w;
  // Each output under its own matrix's power of two where the image stacks several (planted 136: the next one's).
  const int s0 = w.f16_seg[0], s1 = w.f16_seg[1], seg_ctl = TF_FCTL(136) ? 1 : 0;
  auto exp_of = [&](int64_t o) {
    return s1 && o + seg_ctl >= s1 ? w.f16_seg_exp[1] : s0 && o + seg_ctl >= s0 ? w.f16_seg_exp[0] : w.f16_exp;
  };
  const int er[2] = {row_e[g], row_e[g + 8]};
  const bool pairs = (w.n_out & 1) == 0 && (reinterpret_cast<uintptr_t>(A.y) & 7) == 0;  // one 8-byte store a pair
#pragma unroll
  for (int j4 = 0; j4 < kW / 8; j4 += 2) {
    float r[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // scaled a group at a time, so no group's exponents wait in registers
      const int64_t o = out0 + 8 * (j4 + (i >> 2)) + 2 * t + (i & 1), row = row0 + g + 8 * ((i & 3) >> 1);
      r[i] = A.residual && o < w.n_out && row < A.n_rows ? A.residual[row * w.n_out + o] : 0.0f;
      c[4 * j4 + i] = ldexpf(c[4 * j4 + i], -(er[(i & 3) >> 1] + exp_of(o)));
    }
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
      const int64_t o = out0 + 8 * (j4 + (i >> 2)) + 2 * t, row = row0 + g + 8 * ((i & 3) >> 1);
      if (row >= A.n_rows || o >= w.n_out) continue;
      float v[2];
#pragma unroll
      for (int k = 0; k < 2; ++k) v[k] = A.residual ? __fadd_rn(r[i + k], c[4 * j4 + i + k]) : c[4 * j4 + i + k];
      float* y = A.y + row * w.n_out + o;
      if (pairs && o + 1 < w.n_out)
        *reinterpret_cast<float2*>(y) = make_float2(v[0], v[1]);
      else {
        y[0] = v[0];
        if (o + 1 < w.n_out) y[1] = v[1];
      }
      if (TF_FCTL(134) && row == A.n_rows - 1 && (o == w.n_out - 1 || o + 1 == w.n_out - 1))
        A.y[row * w.n_out + w.n_out] = v[0];  // planted: past the end
    }
  }
}

// 128 rows x kW outputs a block, one block a SM; each output the image kernel's (and the decoding kernel's) chain.
template <int kW>
__global__ void __launch_bounds__(kWideThreads, 1) f16_wide_gemm_kernel(F16Args A) {
  grid_wait();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kXB = f16_unit_bytes(128), kIB = kW * 128, kStageB = kXB + kIB, kStages = wide_stages(kW);
  extern __shared__ __align__(128) uint8_t sm[];
  const int tid = threadIdx.x, wg = tid >> 7;
  [[maybe_unused]] const int ctl = A.ctl;
  const DeviceMatrix& w = A.w;
  const int64_t rb = blockIdx.x;  // row blocks fastest: the blocks that share an image tile run together
  const uint32_t base = uint32_t(__cvta_generic_to_shared(sm)), full0 = base + uint32_t(kStages * kStageB);
  const uint32_t empty0 = full0 + 8 * kStages;
  if (tid == 0) image_bars_init(full0, empty0, kStages);
  __syncthreads();
  if (wg == 0) {                                          // one thread starts every copy
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");  // its registers go to the consumers' accumulators
    if (tid == 0)
      image_produce(base, full0, empty0, kStages, kStageB, A.xw + rb * w.units * kXB, kXB,
                    w.f16w + int64_t(blockIdx.y) * w.units * kIB, kIB, w.units);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int ct = tid - 128, lane = ct & 31, g = lane >> 2, t = lane & 3, warp = ct >> 5;  // consumer warp 0..7
  __shared__ int row_e[128];  // the block's row exponents, read while the first stages arrive
  if (ct < 128) row_e[ct] = A.xe[rb * 128 + ct];
  asm volatile("bar.sync 1, 256;" ::: "memory");  // the consumer warpgroups only
  // A (x): a step's second 8 columns are 128 rows of 16 bytes on, the next 8 rows 128 bytes on; 64 rows a warpgroup.
  const uint64_t a_strides = (uint64_t((128 * 16) >> 4) << 16) | (uint64_t(128 >> 4) << 32);
  // B (the image): a step's second 8 columns are kW outputs of 16 bytes on, the next 8 outputs 128 bytes on.
  const uint64_t b_strides = (uint64_t((kW * 16) >> 4) << 16) | (uint64_t(128 >> 4) << 32);
  float c[kW / 2];
#pragma unroll
  for (int i = 0; i < kW / 2; ++i) c[i] = 0.0f;
  for (int64_t u = 0; u < w.units; ++u) {
    const uint32_t s = uint32_t(u % kStages), at = base + s * kStageB;
    mbar_wait(full0 + 8 * s, uint32_t((u / kStages) & 1));
    const uint32_t a_at = (at + (wg - 1) * 64 * 16) >> 4, b_at = (at + kXB) >> 4;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int st = 0; st < 4; ++st) {
      if (TF_FCTL(133) && u == 0 && st == 1) continue;  // planted: a step's terms lost
      wgmma_f16_ss<kW>(c, a_strides | (a_at + uint32_t(st * 4096 >> 4)),
                       b_strides | (b_at + uint32_t(st * kW * 32 >> 4)), (u > 0 || st > 0) ? 1 : 0);
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    if (lane == 0 && u >= 1) mbar_arrive(empty0 + 8 * uint32_t((u - 1) % kStages));  // unit u - 1 is read
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
  for (int i = 0; i < kW / 2; ++i) asm volatile("" : "+f"(c[i])::"memory");
  wide_store<kW>(A, c, row_e + 16 * warp, rb * 128 + 16 * warp, int64_t(blockIdx.y) * kW, g, t, ctl);
#else
  __trap();  // launched only where the sm_90a code runs (f16_takes)
#endif
}

}  // namespace tf::cuda
