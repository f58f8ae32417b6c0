#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/cuda_ctl.cuh"
#include "backend/cuda/cuda_stream.cuh"
#include "backend/cuda/mma_formats.cuh"
#include "backend/cuda/rms_scale.cuh"
#include "backend/cuda/swiglu_of.cuh"
#include "backend/cuda/wgmma_ops.cuh"

// Prompt rows' Q4_K and Q6_K products at one fp16 wgmma a step: row-invariant, but not decode's bits (architecture.md).
namespace tf::cuda {

#if defined(TF_CTL) && TF_CTL
#define TF_FCTL(n) (ctl == (n))
#else
#define TF_FCTL(n) false
#endif

constexpr int kF16Warps = 8;   // two warpgroups: 128 outputs share each staged slice of x
constexpr int kF16Stages = 4;  // 64-column slices of x in flight
constexpr int kF16RowPad = 256;

struct F16Args {
  DeviceMatrix w;
  const uint8_t* xw;  // x's image: [row block][64-column unit][step][8-column half][row][8 halves]
  const int* xe;      // [rows] e_r
  int n_rows;
  float* y;
  const float* residual;
  int ctl;
};

__host__ __device__ constexpr int f16_unit_bytes(int n) { return n * 128; }
constexpr int kF16ImageUnit = 128 * 64 * 2;  // a prompt image's 128 outputs x 64 columns, as x's image lays out rows
constexpr int f16_smem_bytes(int n) { return kF16Stages * f16_unit_bytes(n) + 8 * kF16Stages; }

// y (+ residual) of one warp's outputs; residuals loaded before stores, as y may alias them (or be them).
template <int kN>
__device__ __forceinline__ void f16_store(const F16Args& A, float (&c)[kN / 2], const int* row_e, int64_t row0,
                                          int64_t tile, int g, int t, [[maybe_unused]] int ctl) {
  const DeviceMatrix& w = A.w;
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) c[i] = ldexpf(c[i], -(row_e[8 * (i >> 2) + 2 * t + (i & 1)] + w.f16_exp));
#pragma unroll
  for (int j4 = 0; j4 < kN / 8; j4 += 4) {
    float r[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int64_t o = tile * 16 + g + 8 * ((i & 3) >> 1), row = row0 + 8 * (j4 + (i >> 2)) + 2 * t + (i & 1);
      r[i] = A.residual && o < w.n_out && row < A.n_rows ? A.residual[row * w.n_out + o] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int64_t o = tile * 16 + g + 8 * ((i & 3) >> 1), row = row0 + 8 * (j4 + (i >> 2)) + 2 * t + (i & 1);
      if (o >= w.n_out || row >= A.n_rows) continue;
      const float v = c[4 * j4 + i];
      A.y[row * w.n_out + o] = A.residual ? __fadd_rn(r[i], v) : v;
      if (TF_FCTL(134) && o == w.n_out - 1 && row == A.n_rows - 1)
        A.y[row * w.n_out + o + 1] = v;  // planted: past the end
    }
  }
}

__device__ __forceinline__ uint32_t f16_bits2(__half h) {
  const __half2 v = __halves2half2(h, h);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ __half2 f16_h2(uint32_t u) { return *reinterpret_cast<const __half2*>(&u); }
__device__ __forceinline__ uint32_t f16_u(__half2 h) { return *reinterpret_cast<const uint32_t*>(&h); }
// Pair i of a nibble word as 1024 + q in fp16 (LOP3: (w & 0x000F000F) | 0x64006400).
__device__ __forceinline__ uint32_t f16_magic(uint32_t w) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(w), "n"(0x000F000Fu), "n"(0x64006400u));
  return d;
}

template <int kType>
struct F16W;

template <>
struct F16W<int(GgmlType::Q4_K)> {  // w = fp16(q * fp16(D sc) + fp16(-Dmin m)), D = d 2^e_w
  struct Raw {
    uint4 q;
  };
  static __device__ Raw load(const DeviceMatrix& w, int64_t at) {
    return {__ldg(reinterpret_cast<const uint4*>(w.q) + at)};
  }
  static __device__ void frags(const uint32_t (&m)[2][5], int uu, const Raw& r, float wsc, uint32_t (&a)[4][4]) {
#pragma unroll
    for (int gi = 0; gi < 2; ++gi) {
      const int j = 2 * uu + gi;  // steps 2gi and 2gi + 1 are scale group j
      uint32_t s2[2], n2[2];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const float d = __fmul_rn(mma_f16(m[hr][0]), wsc), dm = __fmul_rn(mma_f16(m[hr][0] >> 16), wsc);
        const float sc = mma_ubyte_float(m[hr][1 + (j >> 2)], j & 3), mn = mma_ubyte_float(m[hr][3 + (j >> 2)], j & 3);
        s2[hr] = f16_bits2(__float2half_rn(__fmul_rn(d, sc)));  // exact product, one rounding
        n2[hr] = f16_bits2(__float2half_rn(-__fmul_rn(dm, mn)));
      }
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const uint32_t wd = mma_word(r.q, 2 * gi + s);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const __half2 q = __hsub2(f16_h2(f16_magic(wd >> (4 * i))), f16_h2(0x64006400u));  // q exactly
          a[2 * gi + s][i] = f16_u(__hfma2(q, f16_h2(s2[i & 1]), f16_h2(n2[i & 1])));
        }
      }
    }
  }
};

template <>
struct F16W<int(GgmlType::Q6_K)> {  // w = fp16((u - 32) * fp16(D sc)), D = d 2^e_w
  struct Raw {
    uint4 q;
    uint2 h;
  };
  static __device__ Raw load(const DeviceMatrix& w, int64_t at) {
    return {__ldg(reinterpret_cast<const uint4*>(w.q) + at), __ldg(reinterpret_cast<const uint2*>(w.h) + at)};
  }
  static __device__ void frags(const uint32_t (&m)[2][5], int uu, const Raw& r, float wsc, uint32_t (&a)[4][4]) {
#pragma unroll
    for (int st = 0; st < 4; ++st) {
      const int j = 4 * uu + st;  // each step is a scale group of 16 columns
      uint32_t s2[2];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const float d = __fmul_rn(mma_f16(m[hr][4]), wsc);
        const float sc = float(int8_t((m[hr][j >> 2] >> (8 * (j & 3))) & 0xFF));
        s2[hr] = f16_bits2(__float2half_rn(__fmul_rn(d, sc)));
      }
      const uint32_t wd = mma_word(r.q, st), hw = ((st >> 1) ? r.h.y : r.h.x) >> (2 * (st & 1));
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t v = f16_magic(wd >> (4 * i)) | ((i == 0 ? hw << 4 : hw >> (4 * i - 4)) & 0x00300030u);
        const __half2 q = __hsub2(f16_h2(v), f16_h2(0x64206420u));  // 1024 + u - 1056 = u - 32 exactly
        a[st][i] = f16_u(__hmul2(q, f16_h2(s2[i & 1])));
      }
    }
  }
};

__device__ __forceinline__ void f16_load8(const float* p, float (&v)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// The largest of every block's m in this cluster of kC, which all threads of each block hold; then a block
// may not exit until cluster_leave, since its peers read its shared memory.
template <int kC>
__device__ __forceinline__ float cluster_max(float m) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ float mine;
  if (threadIdx.x == 0) mine = m;
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  const uint32_t local = uint32_t(__cvta_generic_to_shared(&mine));
#pragma unroll
  for (int k = 0; k < kC; ++k) {
    uint32_t remote;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(k));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    m = fmaxf(m, v);
  }
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#else
  __trap();  // clusters need compute capability 9.0; the launcher never picks this form elsewhere
#endif
  return m;
}
__device__ __forceinline__ void cluster_leave() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

// What the stage makes x from as it reads: x, gate|up rows of 2 n_in (SwiGLU), or x rows (RMSNorm), never stored.
enum F16Src { kStageX = 0, kStageSwiglu = 1, kStageNorm = 2 };

// kC blocks (a cluster) per padded row: x * 2^e_r as fp16 (largest finite |x| into [2^14, 2^15)); rows past n_rows
// are zeros. Block k of a cluster takes the k-th run of the row's 8-column chunks; the max is the same in any order.
template <int kN, int kKeep, int kSrc = kStageX, int kThreads = kRmsThreads, int kC = 1>
__global__ void __launch_bounds__(kThreads)
    f16_stage_kernel(const float* __restrict__ x, int64_t n_in, int64_t n_rows, uint8_t* __restrict__ xw,
                     int* __restrict__ xe, int ctl, const float* __restrict__ norm_w = nullptr, float eps = 0.0f) {
  static_assert(kSrc != kStageNorm || (kThreads == kRmsThreads && kC == 1), "rms_row_scale's tree is one block's");
  grid_wait();
  const int64_t r = blockIdx.x / kC;
  const int rank = int(blockIdx.x % kC);
  __shared__ float red[32];
  const bool live = r < n_rows;
  float scale = 1.0f;
  if constexpr (kSrc == kStageNorm)  // planted 140: the sum of squares lost
    if (live) scale = rms_row_scale(x + r * n_in, n_in, eps, TF_FCTL(140));
  // Eight columns from c8 * 8, or what a planted fault reads instead.
  auto at8 = [&](int64_t c8, float(&v)[8]) {
    const int64_t src = TF_FCTL(132) && r > 0 && c8 < 2 ? r - 1 : r;  // planted: the neighbour row's x
    if constexpr (kSrc == kStageNorm) {
      float nw[8];
      f16_load8(x + src * n_in + 8 * c8, v);
      f16_load8(norm_w + 8 * c8, nw);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = __fmul_rn(__fmul_rn(v[i], scale), nw[i]);
    } else if constexpr (kSrc == kStageSwiglu) {
      float up[8];
      f16_load8(x + src * 2 * n_in + 8 * c8, v);
      f16_load8(x + src * 2 * n_in + n_in + 8 * c8, up);
#pragma unroll
      for (int i = 0; i < 8; ++i)  // planted 138: sigmoid sign slip; 139: the neighbour column's up value
        v[i] = swiglu_value(v[i], TF_FCTL(139) ? up[i ^ 1] : up[i], TF_FCTL(138));
    } else {
      f16_load8(x + src * n_in + 8 * c8, v);
    }
    if (TF_FCTL(131))
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = isfinite(v[i]) ? v[i] : 0.0f;  // planted: non-finite read as 0
  };
  // The first kKeep chunks of each thread stay in registers between the two passes; any beyond are read again.
  const int64_t per = (n_in / 8 + kC - 1) / kC, c_lo = rank * per, c_end = min(n_in / 8, c_lo + per);
  float keep[kKeep][8], mx = 0.0f;
  auto top = [&](const float(&v)[8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (isfinite(v[i])) mx = fmaxf(mx, fabsf(v[i]));  // infinities stay infinite under any power of two
  };
#pragma unroll
  for (int k = 0; k < kKeep; ++k)
    if (const int64_t c8 = c_lo + threadIdx.x + int64_t(k) * blockDim.x; live && c8 < c_end)
      at8(c8, keep[k]), top(keep[k]);
  if (live)
    for (int64_t c8 = c_lo + threadIdx.x + int64_t(kKeep) * blockDim.x; c8 < c_end; c8 += blockDim.x) {
      float v[8];
      at8(c8, v);
      top(v);
    }
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, off));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
  __syncthreads();
  mx = 0.0f;
  for (int i = 0; i < int(blockDim.x >> 5); ++i) mx = fmaxf(mx, red[i]);
  if constexpr (kC > 1) {
    const float all = cluster_max<kC>(mx);
    if (!TF_FCTL(175)) mx = all;  // planted: each block scales by its own max
  }
  int ex = 0;
  if (mx > 0.0f) frexpf(mx, &ex);
  const int e = mx > 0.0f ? 15 - ex : 0;
  if (threadIdx.x == 0 && rank == 0) xe[r] = e;
  // x * 2^e as two exact scalings (e reaches 163 for the smallest rows): ldexpf's bits without its branches.
  const float s1 = __int_as_float((min(e, 127) + 127) << 23), s2 = __int_as_float((max(e - 127, 0) + 127) << 23);
  const int64_t rb = r / kN, n = r % kN;
  auto put = [&](int64_t c8, const float(&v)[8]) {  // eight columns a thread: one 16-byte store
    uint32_t h[4] = {0, 0, 0, 0};
    if (live)
#pragma unroll
      for (int k = 0; k < 4; ++k)
        h[k] = f16_u(
            __floats2half2_rn(__fmul_rn(__fmul_rn(v[2 * k], s1), s2), __fmul_rn(__fmul_rn(v[2 * k + 1], s1), s2)));
    *reinterpret_cast<uint4*>(xw + ((rb * (n_in / 16) + c8 / 2) * 2 + (c8 & 1)) * kN * 16 + n * 16) =
        make_uint4(h[0], h[1], h[2], h[3]);
  };
#pragma unroll
  for (int k = 0; k < kKeep; ++k)
    if (const int64_t c8 = c_lo + threadIdx.x + int64_t(k) * blockDim.x; c8 < c_end) put(c8, keep[k]);
  for (int64_t c8 = c_lo + threadIdx.x + int64_t(kKeep) * blockDim.x; c8 < c_end; c8 += blockDim.x) {
    float v[8] = {};
    if (live) at8(c8, v);
    put(c8, v);
  }
  if constexpr (kC > 1) cluster_leave();
}

// Prompt image: [kW-output block][unit][step][8-column half][output][8 halves], as x's image, so wgmma reads it.
__host__ __device__ constexpr int64_t f16_image_bytes(int64_t n_out, int64_t units, int64_t w = 128) {
  return (n_out + w - 1) / w * units * w * 128;
}

// Rows g and g + 8 of tile tm's scales for slice sl (five words a row), as both the decoding and image kernels read
// them.
__device__ __forceinline__ void f16_meta(const DeviceMatrix& w, int64_t tm, int64_t sl, int g, uint32_t (&m)[2][5]) {
  const uint32_t* p = reinterpret_cast<const uint32_t*>(w.s) + ((tm * w.slices + sl) * 16 + g) * 5;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr)
#pragma unroll
    for (int k = 0; k < 5; ++k) m[hr][k] = __ldg(p + 40 * hr + k);
}

// A warp per (16-output tile, unit), four a block: the decoding kernel's F16W::frags; tile t lands at tile0 + t.
template <int kType>
__global__ void f16_image_kernel(DeviceMatrix w, uint8_t* __restrict__ img, int64_t tile0, int ctl) {
  grid_wait();
  using F = F16W<kType>;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t tile = blockIdx.y, u = int64_t(blockIdx.x) * 4 + (threadIdx.x >> 5), last = (w.n_out + 15) / 16 - 1;
  const int64_t at = tile0 + tile;
  if (u >= w.units) return;
  int64_t tm = tile < last ? tile : last;  // past n_out the block's tail repeats the last tile, as the kernel reads it
  if (TF_FCTL(135) && tm > 0 && u == 1) --tm;  // planted: a unit built from the neighbour tile
  uint32_t m[2][5];
  f16_meta(w, tm, u / 4, g, m);
  uint32_t a[4][4];
  F::frags(m, int(u % 4), F::load(w, (tm * w.units + u) * 32 + lane), ldexpf(1.0f, w.f16_exp), a);
  const int64_t wt = w.f16_tile, per = wt / 16;  // 16-output tiles a block of the image
  uint8_t* dst = img + ((at / per) * w.units + u) * wt * 128 + (at % per) * 16 * 16 + g * 16 + 4 * t;
#pragma unroll
  for (int st = 0; st < 4; ++st)
#pragma unroll
    for (int i = 0; i < 4; ++i)  // a[st][i]: output g + 8 (i & 1), columns 2t, 2t + 1 of half i >> 1
      *reinterpret_cast<uint32_t*>(dst + ((st * 2 + (i >> 1)) * wt + 8 * (i & 1)) * 16) = a[st][i];
}

// Two warpgroups over 128 outputs x kN rows, x by bulk copy, weights decoded 2 units ahead.
template <int kType, int kN>
__global__ void __launch_bounds__(kF16Warps * 32, 1) f16_wgmma_kernel(F16Args A) {
  grid_wait();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using F = F16W<kType>;
  constexpr int kUnitB = f16_unit_bytes(kN), kStageB = kUnitB, kStepB = kN * 32, kAhead = 2, kStages = kF16Stages;
  extern __shared__ __align__(128) uint8_t sm[];
  const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3, warp = tid >> 5;
  [[maybe_unused]] const int ctl = A.ctl;
  const DeviceMatrix& w = A.w;
  const int64_t rb = blockIdx.x;  // row blocks fastest: the blocks that share a weight tile run together
  const int64_t last = (w.n_out + 15) / 16 - 1, tile = int64_t(blockIdx.y) * kF16Warps + warp;
  const int64_t tm = tile < last ? tile : last;
  const uint32_t base = uint32_t(__cvta_generic_to_shared(sm)), bar0 = base + uint32_t(kStages * kStageB);
  const uint8_t* xb = A.xw + rb * w.units * kUnitB;
  auto fetch = [&](int64_t u) {
    const uint32_t st = uint32_t(u % kStages), bar = bar0 + 8 * st;
    mbar_expect(bar, kStageB);
    bulk_copy(base + st * kStageB, xb + u * kUnitB, kUnitB, bar);
  };
  __shared__ int row_e[kN];  // the block's row exponents, for the epilogue
  for (int i = tid; i < kN; i += kF16Warps * 32) row_e[i] = A.xe[rb * kN + i];
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(bar0 + 8 * s);
    mbar_init_fence();
    for (int64_t u = 0; u < kStages && u < w.units; ++u) fetch(u);
  }
  __syncthreads();
  const float wsc = ldexpf(1.0f, w.f16_exp);
  const int64_t at0 = tm * w.units * 32 + lane;
  uint32_t meta[2][5], meta_n[2][5];
  typename F::Raw raw[kAhead];
  f16_meta(w, tm, 0, g, meta_n);
#pragma unroll
  for (int i = 0; i < kAhead; ++i) raw[i] = F::load(w, at0 + (i < w.units ? i : 0) * 32);
  // LBO: a step's second 8 columns are kN rows of 16 bytes on; SBO: the next 8 rows are 128 bytes on.
  const uint64_t lbo_sbo = (uint64_t((kN * 16) >> 4) << 16) | (uint64_t(128 >> 4) << 32);
  float c[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) c[i] = 0.0f;
  uint32_t a[2][4][4];
  for (int64_t sl = 0; sl < w.slices; ++sl) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
#pragma unroll
      for (int k = 0; k < 5; ++k) meta[hr][k] = meta_n[hr][k];
    if (sl + 1 < w.slices) f16_meta(w, tm, sl + 1, g, meta_n);
#pragma unroll
    for (int uu = 0; uu < 4; ++uu) {  // K-quant rows are whole 256-column slices: four units each
      const int64_t u = sl * 4 + uu;
      const typename F::Raw cur = raw[0];
#pragma unroll
      for (int i = 0; i + 1 < kAhead; ++i) raw[i] = raw[i + 1];
      if (u + kAhead < w.units) raw[kAhead - 1] = F::load(w, at0 + (u + kAhead) * 32);
      F::frags(meta, uu, cur, wsc, a[uu & 1]);
      const uint32_t stage = uint32_t(u % kStages), bar = bar0 + 8 * stage;
      mbar_wait(bar, uint32_t((u / kStages) & 1));
      const uint32_t lo = ((base + stage * kStageB) >> 4) | uint32_t(lbo_sbo);
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
      for (int st = 0; st < 4; ++st) {
        if (TF_FCTL(133) && u == 0 && st == 1) continue;  // planted: a step's terms lost
        const uint64_t desc = (lbo_sbo >> 32 << 32) | (lo + uint32_t(st * kStepB >> 4));
        wgmma_f16<kN>(c, a[uu & 1][st], desc, (u > 0 || st > 0) ? 1 : 0);
      }
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
      __syncthreads();  // every warp's wgmma of slice u - 1 is done: its stage can be refilled
      if (tid == 0 && u >= 1 && u - 1 + kStages < w.units) {
        async_proxy_fence();
        fetch(u - 1 + kStages);
      }
    }
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) asm volatile("" : "+f"(c[i])::"memory");
  f16_store<kN>(A, c, row_e, rb * kN, tile, g, t, ctl);
#else
  __trap();  // launched only where the sm_90a code runs (f16_takes)
#endif
}

}  // namespace tf::cuda
