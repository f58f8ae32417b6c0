#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/f16_prompt.cuh"

// The prompt image product: one thread brings x's and the image's units, two consumer warpgroups run the chain.
namespace tf::cuda {

constexpr int kImgThreads = 384;  // one thread of warpgroup 0 brings the units; 1 and 2 take 64 outputs each
constexpr int kImgStageB = f16_unit_bytes(128) + kF16ImageUnit;
constexpr int kImgStages = 6;
constexpr int kImgSmemBytes = kImgStages * kImgStageB + 16 * kImgStages;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// An image product's stage barriers: full completes on a unit's bytes, empty on all eight consumer warps' release.
__device__ __forceinline__ void image_bars_init(uint32_t full0, uint32_t empty0, int stages) {
  for (int s = 0; s < stages; ++s) mbar_init(full0 + 8 * s), mbar_init_count(empty0 + 8 * s, 8);
  mbar_init_fence();
}

// The one producer thread: unit u of x and of the image into stage u % stages once its last unit was released.
__device__ __forceinline__ void image_produce(uint32_t base, uint32_t full0, uint32_t empty0, int stages, int stage_b,
                                              const uint8_t* xb, int x_b, const uint8_t* wb, int img_b, int64_t units) {
  for (int64_t u = 0; u < units; ++u) {
    const uint32_t s = uint32_t(u % stages), full = full0 + 8 * s, to = base + s * stage_b;
    if (u >= stages) mbar_wait(empty0 + 8 * s, uint32_t((u / stages - 1) & 1));
    mbar_expect(full, stage_b);
    bulk_copy(to, xb + u * x_b, x_b, full);
    bulk_copy(to + x_b, wb + u * img_b, img_b, full);
  }
}
#endif

// 128 outputs x 128 rows a block, one block a SM: the decoding kernel's units and chain, so its bits.
__global__ void __launch_bounds__(kImgThreads, 1) f16_image_gemm_kernel(F16Args A) {
  grid_wait();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kXB = f16_unit_bytes(128);
  extern __shared__ __align__(128) uint8_t sm[];
  const int tid = threadIdx.x, wg = tid >> 7;
  [[maybe_unused]] const int ctl = A.ctl;
  const DeviceMatrix& w = A.w;
  const int64_t rb = blockIdx.x;  // row blocks fastest: the blocks that share a weight tile run together
  const uint32_t base = uint32_t(__cvta_generic_to_shared(sm)), full0 = base + uint32_t(kImgStages * kImgStageB);
  const uint32_t empty0 = full0 + 8 * kImgStages;
  if (tid == 0) image_bars_init(full0, empty0, kImgStages);
  __syncthreads();
  if (wg == 0) {  // one thread starts every copy
    if (tid == 0)
      image_produce(base, full0, empty0, kImgStages, kImgStageB, A.xw + rb * w.units * kXB, kXB,
                    w.f16w + int64_t(blockIdx.y) * w.units * kF16ImageUnit, kF16ImageUnit, w.units);
    return;
  }
  const int ct = tid - 128, lane = ct & 31, g = lane >> 2, t = lane & 3, warp = ct >> 5;  // consumer warp 0..7
  __shared__ int row_e[128];  // the block's row exponents, read while the first stages arrive
  if (ct < 128) row_e[ct] = A.xe[rb * 128 + ct];
  asm volatile("bar.sync 1, 256;" ::: "memory");  // the consumer warpgroups only
  // B (x): a step's second 8 columns are 128 rows of 16 bytes on; the next 8 rows 128 bytes on.
  const uint64_t lbo_sbo = (uint64_t((128 * 16) >> 4) << 16) | (uint64_t(128 >> 4) << 32);
  // A (the image) has the same strides: a half is 128 outputs on, and each warpgroup reads its own 64 of them.
  float c[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) c[i] = 0.0f;
  for (int64_t u = 0; u < w.units; ++u) {
    const uint32_t s = uint32_t(u % kImgStages), at = base + s * kImgStageB;
    mbar_wait(full0 + 8 * s, uint32_t((u / kImgStages) & 1));
    const uint32_t lo = (at >> 4) | uint32_t(lbo_sbo);
    const uint32_t a_lo = ((at + kXB + (wg - 1) * 64 * 16) >> 4) | uint32_t(lbo_sbo);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int st = 0; st < 4; ++st) {
      if (TF_FCTL(133) && u == 0 && st == 1) continue;  // planted: a step's terms lost
      wgmma_f16_ss<128>(c, (lbo_sbo >> 32 << 32) | (a_lo + uint32_t(st * 4096 >> 4)),
                        (lbo_sbo >> 32 << 32) | (lo + uint32_t(st * 4096 >> 4)), (u > 0 || st > 0) ? 1 : 0);
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    if (lane == 0 && u >= 1) mbar_arrive(empty0 + 8 * uint32_t((u - 1) % kImgStages));  // unit u - 1 is read
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(c[i])::"memory");
  f16_store<128>(A, c, row_e, rb * 128, int64_t(blockIdx.y) * 8 + warp, g, t, ctl);
#else
  __trap();  // launched only where the sm_90a code runs (f16_takes)
#endif
}

}  // namespace tf::cuda
