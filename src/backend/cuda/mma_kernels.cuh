#pragma once
#include "backend/cuda/cuda_stream.cuh"
#include "backend/cuda/mma_formats.cuh"
#include "backend/cuda/mma_ops.cuh"

// Tensor-core products over the layout of mma_pack.cpp. Per element (row r, output o) the arithmetic is fixed: for
// each 256-column slice, for each scale group, C = 0 then one m16n8k16 per 16-column step with x's bf16 hi part and
// one with its lo part; p = fma(scale, C, p) (and p = fma(min, X, p) with the group's column sum X); the slices'
// p added in order. A warp holds 16 outputs x 8 rows per tile and no value crosses rows, so no row's bits depend on
// the tile, the warp shape or how many rows share the call.
namespace tf::cuda {

#if defined(TF_CTL) && TF_CTL
#define TF_MCTL(n) (ctl == (n))
#else
#define TF_MCTL(n) false
#endif

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  mma_m16n8k16(c, a[0], a[1], a[2], a[3], b0, b1);
}
__device__ __forceinline__ void mma_bf16_z(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  mma_m16n8k16_zero(c, a[0], a[1], a[2], a[3], b0, b1);
}
template <int MT, int NT>
__device__ __forceinline__ void mma_zero(float (&v)[MT][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) v[mt][nt][e] = 0.0f;
}

struct MmaArgs {
  DeviceMatrix w;
  const uint4* xs;    // [rows][n_in/16 steps][4 lanes]: hi(2t,2t+1), hi(2t+8,2t+9), lo(...), lo(...)
  const float* xsum;  // [rows][n_in/32]: each 32-column group's sum of x
  int n_rows;
  float* y;
  const float* residual;
  float* partial;  // [slices][rows][n_out] when the slices run in separate blocks
  int ctl;
  int round = 0;          // mma_block_kernel: slices parked in shared memory per round
  uint8_t* xw = nullptr;  // set when mma_gemv chose warpgroup mma: x in the blocks' shared-memory image
  float* xsw = nullptr;
  bool staged = false;   // xw already holds x's image (mma_stage), so the product launches no stage kernel
  bool prewait = false;  // few-row kernels issue their first weight loads before waiting on the kernel before them
};

// Units a warp of one 16 x 8 tile loads before its first mma; larger tiles keep their registers for accumulators.
template <int kType, int MT, int NT>
constexpr int mma_ahead() {
  return MT == 1 && NT == 1 && MmaF<kType>::kQ <= 32 ? 4 : 1;
}

// One slice of MT 16-output tiles x NT 8-row tiles into p (per lane: outputs g, g+8 x rows 2t, 2t+1 of each tile).
// Reads past the last tile or row are clamped (never stored); kOne skips odd rows' scale steps (row 0 is kept).
// PF 4: units past a short slice rerun unit 0 unadded, so no branch lets ptxas defer the loads to their use.
// wait: run grid_wait once the weights' first loads are issued (weights never depend on the kernels before).
template <int kType, int MT, int NT, bool kOne = false, int PF = mma_ahead<kType, MT, NT>()>
__device__ __forceinline__ void mma_slice(const MmaArgs& A, int64_t tile0, int sl, int64_t row0, float (&p)[MT][NT][4],
                                          bool wait = false) {
  using F = MmaF<kType>;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  [[maybe_unused]] const int ctl = A.ctl;
  const DeviceMatrix& w = A.w;
  const int64_t last_tile = (w.n_out + 15) / 16 - 1, steps = w.n_in / 16, groups32 = w.n_in / 32;
  const int64_t rem = w.units - int64_t(sl) * 4;
  const int nk = rem < 4 ? int(rem) : 4;
  int64_t at[MT];  // this lane's first 64-column unit of the slice, per tile
  uint32_t meta[MT][2][F::kMeta > 0 ? F::kMeta : 1];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int64_t tm = tile0 + mt < last_tile ? tile0 + mt : last_tile;
    at[mt] = (tm * w.units + int64_t(sl) * 4) * 32 + lane;
    const uint32_t* m = reinterpret_cast<const uint32_t*>(w.s) + ((tm * w.slices + sl) * 16 + g) * F::kMeta;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
#pragma unroll
      for (int k = 0; k < F::kMeta; ++k) meta[mt][hr][k] = __ldg(m + 8 * hr * F::kMeta + k);
  }
  mma_zero(p);
  typename F::Raw ahead[PF][MT];
#pragma unroll
  for (int k = 0; k < PF; ++k)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) ahead[k][mt] = F::load(w.q, w.h, at[mt] + (k < nk ? k : 0) * 32);
  if (wait) grid_wait();
  const uint4* const xs = A.xs;  // from the kernels before: read by __ldca (L1-cached, not .nc), kept after the wait
  const float* const xsum0 = A.xsum;
  const uint4* xb[NT];  // row g of each row tile, at the slice's first step
  const float* xsp[NT][2];
  [[maybe_unused]] bool has_left[NT];  // a row above to read, for the planted neighbour read
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int64_t r = row0 + nt * 8 + g < A.n_rows ? row0 + nt * 8 + g : A.n_rows - 1;
    has_left[nt] = r > 0;
    xb[nt] = xs + (r * steps + int64_t(sl) * 16) * 4 + t;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int64_t rs = row0 + nt * 8 + 2 * t + e;
      xsp[nt][e] = xsum0 + (rs < A.n_rows ? rs : A.n_rows - 1) * groups32 + int64_t(sl) * 8;
    }
  }
#pragma unroll
  for (int kb = 0; kb < 4; ++kb) {
    if (PF == 1 && kb >= nk) break;
    const bool live = kb < nk;
    const int ku = live ? kb : 0;
    typename F::Raw raw[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      raw[mt] = PF == 4 || kb == 0 ? ahead[kb % PF][mt] : F::load(w.q, w.h, at[mt] + kb * 32);
    float c[MT][NT][4];
#pragma unroll
    for (int st = 0; st < 4; ++st) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) F::frag(raw[mt], st, a[mt]);
      const bool first = st % F::kSpg == 0;  // the group's first step starts from a zero accumulator
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint4* src = xb[nt] + (ku * 4 + st) * 4;
        if (TF_MCTL(102) && has_left[nt] && sl == 0 && kb == 0 && st < 2)
          src -= steps * 4;  // planted: a row reads its neighbour's activations
        const uint4 b = __ldca(src);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if (first)
            mma_bf16_z(c[mt][nt], a[mt], b.x, b.y);
          else
            mma_bf16(c[mt][nt], a[mt], b.x, b.y);
          if (!TF_MCTL(103)) mma_bf16(c[mt][nt], a[mt], b.z, b.w);  // planted: the lo part dropped
        }
      }
      if (st % F::kSpg == F::kSpg - 1) {
        const int j = (ku * 4 + st) / F::kSpg;
        float xsum[NT][2];
        if constexpr (F::kMin) {
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) xsum[nt][e] = kOne && e == 1 ? 0.0f : __ldca(xsp[nt][e] + j);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          // By the unrolled unit, not ku: a runtime index put meta in local memory; a dead unit's sum is dropped.
          const int jm = (kb * 4 + st) / F::kSpg;
          const float2 s[2] = {F::group(meta[mt][0], jm), F::group(meta[mt][1], jm)};
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              if (kOne && (e & 1)) continue;
              float v = p[mt][nt][e];
              if constexpr (F::kScaled)
                v = fmaf(s[e >> 1].x, c[mt][nt][e], v);
              else
                v = __fadd_rn(v, c[mt][nt][e]);
              if constexpr (F::kMin) v = fmaf(s[e >> 1].y, xsum[nt][e & 1], v);
              p[mt][nt][e] = live ? v : p[mt][nt][e];
            }
        }
      }
    }
  }
}

// Few rows: a warp per (MT x 16 outputs, slice), partials to memory, added in slice order by mma_reduce_kernel.
template <int kType, int MT, int NT, bool kOne = false>
__global__ void __launch_bounds__(128, NT == 1 ? 4 : 1) mma_split_kernel(MmaArgs A) {
  if (!A.prewait) grid_wait();
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t tile0 = (int64_t(blockIdx.x) * 4 + (threadIdx.x >> 5)) * MT, sl = blockIdx.y;
  if (tile0 >= (A.w.n_out + 15) / 16) return;
  float p[MT][NT][4];
  mma_slice<kType, MT, NT, kOne>(A, tile0, int(sl), 0, p, A.prewait);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t o = (tile0 + mt) * 16 + g + 8 * (e >> 1), row = nt * 8 + 2 * t + (e & 1);
        if (o < A.w.n_out && row < A.n_rows) A.partial[(sl * A.n_rows + row) * A.w.n_out + o] = p[mt][nt][e];
      }
}

// Few rows, a block per MT output tiles: warp w takes slices w, w+8, ... of a round and parks each slice's partial
// in shared memory ([round][E], lane-major so a warp's stores and the adds hit 32 banks), then the block adds them in
// slice order: the split kernel's sums without a second kernel. Thread i holds element i + 256 q in tot[q].
template <int MT, int NT>
constexpr int kMmaBlockQ = (MT * NT * 4 * 32 + 255) / 256;
template <int kType, int MT, int NT, bool kOne>
__device__ __forceinline__ void mma_block_sum(const MmaArgs& A, int64_t tile0, float* sm_part,
                                              float (&tot)[kMmaBlockQ<MT, NT>]) {
  constexpr int E = MT * NT * 4 * 32, Q = kMmaBlockQ<MT, NT>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  [[maybe_unused]] const int ctl = A.ctl;
  if (A.prewait && warp >= (A.w.slices < A.round ? A.w.slices : A.round)) grid_wait();  // a warp with no slice
  for (int r0 = 0; r0 < A.w.slices; r0 += A.round) {
    const int rn = A.w.slices - r0 < A.round ? A.w.slices - r0 : A.round;
    for (int j = warp; j < rn; j += 8) {
      float p[MT][NT][4];
      mma_slice<kType, MT, NT, kOne>(A, tile0, r0 + j, 0, p, A.prewait && r0 + j == warp);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) sm_part[j * E + ((mt * NT + nt) * 4 + e) * 32 + lane] = p[mt][nt][e];
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      const int i = int(threadIdx.x) + 256 * q;
      if (i < E)
        for (int j = 0; j < rn; ++j) {
          const float v = sm_part[(TF_MCTL(104) ? rn - 1 - j : j) * E + i];  // planted: a round's slices reversed
          tot[q] = r0 + j == 0 ? v : __fadd_rn(tot[q], v);
        }
    }
    __syncthreads();
  }
}
// Where element i of a block's tiles lands: output o of row `row`.
template <int MT, int NT>
__device__ __forceinline__ void mma_block_at(int i, int64_t tile0, int64_t& o, int64_t& row) {
  const int ln = i & 31, k = i >> 5, e = k & 3, nt = (k >> 2) % NT, mt = (k >> 2) / NT;
  o = (tile0 + mt) * 16 + (ln >> 2) + 8 * (e >> 1), row = nt * 8 + 2 * (ln & 3) + (e & 1);
}
template <int MT, int NT>
__device__ __forceinline__ void mma_block_store(const MmaArgs& A, int64_t tile0,
                                                const float (&tot)[kMmaBlockQ<MT, NT>]) {
  constexpr int E = MT * NT * 4 * 32;
#pragma unroll
  for (int q = 0; q < kMmaBlockQ<MT, NT>; ++q) {
    const int i = int(threadIdx.x) + 256 * q;
    if (i >= E) continue;
    int64_t o, row;
    mma_block_at<MT, NT>(i, tile0, o, row);
    if (o >= A.w.n_out || row >= A.n_rows) continue;
    const int64_t at = row * A.w.n_out + o;
    A.y[at] = A.residual ? __fadd_rn(A.residual[at], tot[q]) : tot[q];
  }
}

template <int kType, int MT, int NT, bool kOne = false>
__global__ void __launch_bounds__(256, 2) mma_block_kernel(MmaArgs A) {
  if (!A.prewait) grid_wait();
  extern __shared__ float sm_part[];
  const int64_t tile0 = int64_t(blockIdx.x) * MT;
  float tot[kMmaBlockQ<MT, NT>];
  mma_block_sum<kType, MT, NT, kOne>(A, tile0, sm_part, tot);
  mma_block_store<MT, NT>(A, tile0, tot);
}

// One row's products of one split x (Q, K and V) in one launch (mma_kernels_group.cu): a block per 16 outputs of any
// of them, summed as mma_block_kernel sums one row. `end`: blocks through product i. With rope.on, products 0, 1, 2
// are Q, K and V, and the blocks do rope_store's work on them.
constexpr int kMmaGroupMax = 3;
struct MmaGroup {
  MmaArgs a[kMmaGroupMax];
  int64_t end[kMmaGroupMax];
  int count;
  RopeKv rope;
};

// Many rows: a block of 2 x 2 warps, each MT x NT tiles, every slice in order with the running total in registers.
template <int kType, int MT, int NT>
__global__ void __launch_bounds__(128) mma_full_kernel(MmaArgs A) {
  grid_wait();
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
  const int64_t tile0 = (int64_t(blockIdx.x) * 2 + (warp & 1)) * MT;
  const int64_t row0 = (int64_t(blockIdx.y) * 2 + (warp >> 1)) * NT * 8;
  if (tile0 >= (A.w.n_out + 15) / 16 || row0 >= A.n_rows) return;
  float tot[MT][NT][4];
  for (int sl = 0; sl < A.w.slices; ++sl) {
    float p[MT][NT][4];
    mma_slice<kType, MT, NT>(A, tile0, sl, row0, p);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) tot[mt][nt][e] = sl == 0 ? p[mt][nt][e] : __fadd_rn(tot[mt][nt][e], p[mt][nt][e]);
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t o = (tile0 + mt) * 16 + g + 8 * (e >> 1), row = row0 + nt * 8 + 2 * t + (e & 1);
        if (o >= A.w.n_out || row >= A.n_rows) continue;
        const int64_t at = row * A.w.n_out + o;
        A.y[at] = A.residual ? __fadd_rn(A.residual[at], tot[mt][nt][e]) : tot[mt][nt][e];
      }
}

constexpr int kMmaSplitRows = 32;  // up to this many rows the slices run in separate blocks or warps

template <int kType>
bool wgmma_takes(const MmaArgs& A);  // mma_wgmma.cuh
template <int kType>
void launch_wgmma(const MmaArgs& A);
void mma_note_wgmma_launch();  // cuda_mma.cu

template <int kType, int NT, bool kOne = false>
void launch_block(const MmaArgs& A) {  // a block per output tile, A.round slices x NT * 128 floats of shared memory
  const int64_t tiles = (A.w.n_out + 15) / 16;
  launch_k(mma_block_kernel<kType, 1, NT, kOne>, unsigned(tiles), 256, size_t(A.round) * NT * 128 * sizeof(float), A);
}

template <int kType>
void launch_mma(const MmaArgs& A) {
  const int64_t tiles = (A.w.n_out + 15) / 16;
  if (A.round > 0) {
    switch ((A.n_rows + 7) / 8) {
      case 1:
        if (A.n_rows == 1)
          launch_block<kType, 1, true>(A);
        else
          launch_block<kType, 1>(A);
        break;
      case 2:
        launch_block<kType, 2>(A);
        break;
      case 3:
        launch_block<kType, 3>(A);
        break;
      default:
        launch_block<kType, 4>(A);
        break;
    }
    return;
  }
  if (A.n_rows <= kMmaSplitRows) {
    // Tiles per warp (never changing a row's sums): four for bytes in flight, one for wide BF16 or under 128 tiles.
    constexpr int kWide = MmaF<kType>::kQ >= 64;
    constexpr int MT1 = kWide ? 1 : 4, MT2 = kWide ? 1 : 2;
    const bool narrow = tiles < 128;
    const unsigned per_block = 4 * (A.n_rows <= 8 ? (narrow ? 1 : MT1) : MT2);
    const dim3 grid(unsigned((tiles + per_block - 1) / per_block), unsigned(A.w.slices));
    switch ((A.n_rows + 7) / 8) {
      case 1:
        // One row skips the other rows' scale steps where formats have mins (without them it gains nothing).
        if constexpr (MmaF<kType>::kMin) {
          if (A.n_rows == 1) {
            if (narrow)
              launch_k(mma_split_kernel<kType, 1, 1, true>, grid, 128, 0, A);
            else
              launch_k(mma_split_kernel<kType, MT1, 1, true>, grid, 128, 0, A);
            break;
          }
        }
        if (narrow)
          launch_k(mma_split_kernel<kType, 1, 1>, grid, 128, 0, A);
        else
          launch_k(mma_split_kernel<kType, MT1, 1>, grid, 128, 0, A);
        break;
      case 2:
        launch_k(mma_split_kernel<kType, MT2, 2>, grid, 128, 0, A);
        break;
      case 3:
        launch_k(mma_split_kernel<kType, MT2, 3>, grid, 128, 0, A);
        break;
      default:
        launch_k(mma_split_kernel<kType, MT2, 4>, grid, 128, 0, A);
        break;
    }
    return;
  }
  if (wgmma_takes<kType>(A)) {
    launch_wgmma<kType>(A);
    return;
  }
  constexpr int MT = 2, NT = 2;  // 32 x 16 per warp keeps the three accumulator sets within the register file
  const dim3 grid(unsigned((tiles + 2 * MT - 1) / (2 * MT)), unsigned((A.n_rows + 16 * NT - 1) / (16 * NT)));
  launch_k(mma_full_kernel<kType, MT, NT>, grid, 128, 0, A);
}

}  // namespace tf::cuda

#include "backend/cuda/mma_wgmma.cuh"
