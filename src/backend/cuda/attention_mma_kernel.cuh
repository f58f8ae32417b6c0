#pragma once
// The attention kernels themselves (device code); cuda_attention_mma.cu, their only includer, holds the builds.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/cuda_ctl.cuh"
#include "backend/cuda/cuda_stream.cuh"
#include "backend/cuda/mma_ops.cuh"
#include "backend/cuda/mma_split.cuh"
#include "backend/cuda/paged_kv.cuh"
#include "backend/cuda/softmax_step.cuh"

namespace tf::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int64_t kChunkKeys = kAttnChunkKeys;  // one 32-key block per warp
static_assert(kChunkKeys == kWarps * 32);

// Chunk folding shared by the in-block pass and the combine kernel, so both give the same bits.
struct FoldW {
  float a, b, m;
};
__device__ __forceinline__ FoldW fold_weights(float run_m, float m) {
  const float mx = fmaxf(run_m, m);
  return {expf(run_m - mx), expf(m - mx), mx};
}
__device__ __forceinline__ float fold_value(float run, float v, const FoldW& w) {
  return __fadd_rn(__fmul_rn(run, w.a), __fmul_rn(v, w.b));
}
// Keys a row attends (planted 141: one past its causal limit).
__device__ __forceinline__ int64_t row_keys(const int32_t* pos, int64_t r) {
  return int64_t(pos[r]) + 1 + (TF_DCTL(141) ? 1 : 0);
}
// A warp's 32 output columns of a finished row: o / l, stored plain and split for the output product.
__device__ __forceinline__ void store_row(float o, float l, int64_t r, int64_t col, int64_t width, float* out,
                                          uint4* xs, float* xsum) {
  const float y = __fdiv_rn(o, l);
  out[r * width + col + (threadIdx.x & 31)] = y;
  if (xs) split_group_warp(TF_DCTL(143) ? o : y, r, col / 32, width, xs, xsum);  // planted 143: split before the divide
}

// Shared memory of a block of T M tiles (16 (row, head) pairs each); q holds the tiles' Q fragments when T > 1.
struct NoQ {};
template <int D, int T>
struct AttnSmem {
  static constexpr int M = 16 * T;
  float m[kWarps][M], l[kWarps][M], f[kWarps][M], L[M], Mx[M];
  float run_a[M], run_b[M], run_m[M], run_l[M];
  int first[M];
  bool take[M];
  uint4 frag[T][kWarps][4][32];  // per tile and 32-key block: its four score tiles, then P's hi and lo fragments
  std::conditional_t<(T > 1), uint4[T][D / 16][2][32], NoQ> q;
  float o[M][D + 4];  // padded: rows D apart put a warp's 8 row groups on one bank (8-way conflicts)
};

// T tiles of 16 (row, head) pairs of one KV head a block, keys shared by its warps: the bits of one warp per block.
// kOne: a block per row, whose keys the launcher knows fit one chunk, so no pass search, partials or chunk fold.
template <int D, int kMinBlocks, int T, bool kOne = false>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    attention_mma_kernel(const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos, const int32_t* row_seq,
                         PagedKv kv, int n_head, int n_kv_head, float scale, float* out, uint4* xs, float* xsum,
                         float* part, bool pull) {
  constexpr int kDn = D / 8 / kWarps;  // 8-column groups of P V per warp
  static_assert(16 * T <= 32, "a pass's M rows are one warp's ballot");
  static_assert(!kOne || T == 1, "the one-row build holds one row");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto& S = *reinterpret_cast<AttnSmem<D, T>*>(smem_raw);
  const int G = n_head / n_kv_head, RT = kOne ? 1 : 16 / G;
  if constexpr (kOne) part = nullptr;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t row0 = int64_t(blockIdx.x) * RT * T;
  int kvh = blockIdx.y;
  const int kvh_read = (TF_DCTL(142) && n_kv_head > 1) ? (kvh + 1) % n_kv_head : kvh;  // planted: wrong KV head
  // M row m of tile mt is (row mt * RT + m / G, head m % G).
  auto in_pass = [&](int mt, int m, int seq) {
    const int64_t r = row0 + mt * RT + m / G;
    return m < RT * G && r < n_rows && row_seq[r] == seq;
  };
  bool waited = false;  // staged rows and positions precede the round, so the passes are found before waiting
  for (int first = 0; first < RT * T; ++first) {
    const int64_t fr = row0 + first;
    if (fr >= n_rows) break;
    const int seq = row_seq[fr];
    bool seen = false;
    for (int e = 0; e < first; ++e) seen |= row_seq[row0 + e] == seq;
    if (seen) continue;  // that sequence's pass already ran
    int64_t n_keys = 0;
    for (int e = first; e < RT * T && row0 + e < n_rows; ++e)
      if (row_seq[row0 + e] == seq) n_keys = max(n_keys, row_keys(pos, row0 + e));
    if (kOne && TF_DCTL(148)) n_keys = min(n_keys, kChunkKeys / 2);  // planted: the one-row build's keys cut at 128
    const int64_t n_chunks = n_keys > 0 ? (n_keys + kChunkKeys - 1) / kChunkKeys : 1;  // a pass always folds chunk 0
    if (part && int64_t(blockIdx.z) >= n_chunks) continue;  // this block's chunk holds none of the pass's keys
    int64_t lim[T][2];  // per tile and M row of this lane: keys allowed (0: row not in the pass)
    uint32_t qh[T == 1 ? D / 16 : 1][4], ql[T == 1 ? D / 16 : 1][4];
    // Q of tile mt split into A fragments: in registers with one tile, else tile mt's warp puts them in shared memory.
    auto load_q = [&](int mt, uint32_t(&h)[D / 16][4], uint32_t(&l)[D / 16][4]) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int m = g + 8 * hr;
        const bool act = in_pass(mt, m, seq);
        const float* qr = q + (row0 + mt * RT + m / G) * q_stride + (int64_t(kvh) * G + m % G) * D;
        if (!__any_sync(0xffffffffu, act)) {  // rows past the tile's (decode: most of them) hold zeros, unsplit
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk) h[kk][hr] = l[kk][hr] = h[kk][2 + hr] = l[kk][2 + hr] = 0;
          continue;
        }
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          float v[4] = {0, 0, 0, 0};
          if (act)
            v[0] = qr[16 * kk + 2 * t], v[1] = qr[16 * kk + 2 * t + 1], v[2] = qr[16 * kk + 2 * t + 8],
            v[3] = qr[16 * kk + 2 * t + 9];
          bf16_split2(v[0], v[1], h[kk][hr], l[kk][hr]);
          bf16_split2(v[2], v[3], h[kk][2 + hr], l[kk][2 + hr]);
        }
      }
    };
#pragma unroll
    for (int mt = 0; mt < T; ++mt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int m = g + 8 * hr;
        lim[mt][hr] = in_pass(mt, m, seq) ? row_keys(pos, row0 + mt * RT + m / G) : 0;
      }
    // The pass's M rows (tile mt's row m at bit 16 mt + m): the stores visit only these.
    const uint32_t act = __ballot_sync(0xffffffffu, lane < 16 * T && in_pass(lane / 16, lane % 16, seq));
    if (!waited && pull) {  // the chunk's keys and values into L2 while the kernel before runs (L2 is coherent)
      const int64_t j = (part ? int64_t(blockIdx.z) : 0) * kChunkKeys + 32 * warp + lane;
      if (j < n_keys) {
        const float* kr = kv_row_of(kv, seq, j, false) + int64_t(kvh_read) * D;
        const float* vr = kv_row_of(kv, seq, j, true) + int64_t(kvh_read) * D;
#pragma unroll
        for (int b = 0; b < D; b += 32)
          asm volatile("prefetch.global.L2 [%0];\n\tprefetch.global.L2 [%1];" ::"l"(kr + b), "l"(vr + b));
      }
    }
    if (!waited) grid_wait(), waited = true;  // Q, keys and outputs are the previous kernels'
    if constexpr (T == 1) {
      load_q(0, qh, ql);
    } else {
      for (int mt = warp; mt < T; mt += kWarps) {
        uint32_t h[D / 16][4], l[D / 16][4];
        load_q(mt, h, l);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
          S.q[mt][kk][0][lane] = make_uint4(h[kk][0], h[kk][1], h[kk][2], h[kk][3]),
          S.q[mt][kk][1][lane] = make_uint4(l[kk][0], l[kk][1], l[kk][2], l[kk][3]);
      }
      __syncthreads();
    }
    // This warp's columns of the chunk's merged output, as (M row, column).
    auto put = [&](const float(&x)[T][kDn][4]) {
#pragma unroll
      for (int mt = 0; mt < T; ++mt)
#pragma unroll
        for (int dd = 0; dd < kDn; ++dd)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            S.o[mt * 16 + g + 8 * (e >> 1)][(warp * kDn + dd) * 8 + 2 * t + (e & 1)] = x[mt][dd][e];
    };
    const int64_t c_first = part ? int64_t(blockIdx.z) : 0, c_end = kOne ? 1 : part ? c_first + 1 : n_chunks;
    for (int64_t c = c_first; c < c_end; ++c) {
      const int64_t kb = c * kChunkKeys;
      const int n_tiles = n_keys > kb ? int((min(kChunkKeys, n_keys - kb) + 7) / 8) : 0;
      // This warp's columns of block w's values (0 past the last key), loaded a block ahead where registers allow.
      auto load_v = [&](int w, float(&vv)[2][kDn][4]) {
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          // Pages hold whole 16-key groups (the launcher checks): one page lookup for the step's 16 keys.
          const int64_t jb = kb + 32 * w + 16 * kk;
          const float* vb = kv_row_of(kv, seq, jb < n_keys ? jb : 0, true) + int64_t(kvh_read) * D;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int64_t j = jb + 2 * t + (i & 1) + 8 * (i >> 1);
            const float* vr = vb + (j - jb) * kv.kv_row;
#pragma unroll
            for (int dd = 0; dd < kDn; ++dd) vv[kk][dd][i] = j < n_keys ? vr[(warp * kDn + dd) * 8 + g] : 0.0f;
          }
        }
      };
      constexpr bool kAhead = T > 1 || kMinBlocks == 1;  // loads ahead: not in the register-capped one-tile build
      constexpr bool kEarlyV = kMinBlocks == 1;          // room to hold the first values through Q K^T and the softmax
      float vnext[2][kDn][4];
      if (kAhead && kEarlyV && kb < n_keys) load_v(0, vnext);
      // Q K^T by 8-key tile, none past the last key (the softmax masks those slots); two tiles loaded together.
      constexpr int kP = kAhead ? 2 : 1;
      for (int i0 = warp; i0 < n_tiles; i0 += kP * kWarps) {
        float2 ka[kP][D / 16], kc[kP][D / 16];
#pragma unroll
        for (int p = 0; p < kP; ++p) {
          const int64_t j = kb + 8 * (i0 + p * kWarps) + g;
          const float* kr = kv_row_of(kv, seq, j < n_keys ? j : 0, false) + int64_t(kvh_read) * D;
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk) {
            ka[p][kk] = *reinterpret_cast<const float2*>(kr + 16 * kk + 2 * t);
            kc[p][kk] = *reinterpret_cast<const float2*>(kr + 16 * kk + 2 * t + 8);
          }
        }
        // Both key tiles' and all M tiles' score sums side by side: independent mma chains to interleave.
        float s[kP][T][4] = {};
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
          for (int p = 0; p < kP; ++p) {
            uint32_t kh0, kl0, kh1, kl1;
            bf16_split2(ka[p][kk].x, ka[p][kk].y, kh0, kl0);
            bf16_split2(kc[p][kk].x, kc[p][kk].y, kh1, kl1);
#pragma unroll
            for (int mt = 0; mt < T; ++mt) {
              uint4 a, b;
              if constexpr (T == 1)
                a = make_uint4(qh[kk][0], qh[kk][1], qh[kk][2], qh[kk][3]),
                b = make_uint4(ql[kk][0], ql[kk][1], ql[kk][2], ql[kk][3]);
              else
                a = S.q[mt][kk][0][lane], b = S.q[mt][kk][1][lane];
              mma_m16n8k16(s[p][mt], a.x, a.y, a.z, a.w, kh0, kh1);
              mma_m16n8k16(s[p][mt], a.x, a.y, a.z, a.w, kl0, kl1);
              mma_m16n8k16(s[p][mt], b.x, b.y, b.z, b.w, kh0, kh1);
            }
          }
#pragma unroll
        for (int p = 0; p < kP; ++p) {
          const int i = i0 + p * kWarps;
          if (i >= n_tiles) break;
#pragma unroll
          for (int mt = 0; mt < T; ++mt)
            S.frag[mt][i >> 2][i & 3][lane] = make_uint4(__float_as_uint(s[p][mt][0]), __float_as_uint(s[p][mt][1]),
                                                         __float_as_uint(s[p][mt][2]), __float_as_uint(s[p][mt][3]));
        }
      }
      __syncthreads();
      // Warp w's block of each tile: scaled, causally masked scores, its row maxima and sums, and P split.
#pragma unroll 1
      for (int mt = 0; mt < T; ++mt) {
        float mrun[2] = {-INFINITY, -INFINITY}, lrun[2] = {0.0f, 0.0f};
        int64_t lm[2] = {lim[0][0], lim[0][1]};  // tile mt's limits by selects: lim stays in registers
#pragma unroll
        for (int u = 1; u < T; ++u)
          if (u == mt) lm[0] = lim[u][0], lm[1] = lim[u][1];
        if (kb + 32 * warp < n_keys) {
          float s[4][4];
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
            const uint4 v = S.frag[mt][warp][nt][lane];
            s[nt][0] = __uint_as_float(v.x), s[nt][1] = __uint_as_float(v.y), s[nt][2] = __uint_as_float(v.z),
            s[nt][3] = __uint_as_float(v.w);
          }
          float bmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
          for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int64_t j = kb + 32 * warp + nt * 8 + 2 * t + (e & 1);
              s[nt][e] = j < lm[e >> 1] ? __fmul_rn(s[nt][e], scale) : -INFINITY;
              bmax[e >> 1] = fmaxf(bmax[e >> 1], s[nt][e]);
            }
          float alpha[2], rs[2];
          softmax_rescale(bmax, mrun, alpha);
          softmax_exp(s, mrun, rs);
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {  // lanes t = 0..3 of a row: (0+1) + (2+3) in every lane
            rs[hr] = __fadd_rn(rs[hr], __shfl_xor_sync(0xffffffffu, rs[hr], 1));
            rs[hr] = __fadd_rn(rs[hr], __shfl_xor_sync(0xffffffffu, rs[hr], 2));
            lrun[hr] = __fadd_rn(__fmul_rn(lrun[hr], alpha[hr]), rs[hr]);
          }
          // P as the A operand (keys along k), 16 keys per step; each lane overwrites only its own scores.
#pragma unroll
          for (int kk = 0; kk < 2; ++kk) {
            uint4 h, l;
            bf16_split2(s[2 * kk][0], s[2 * kk][1], h.x, l.x);
            bf16_split2(s[2 * kk][2], s[2 * kk][3], h.y, l.y);
            bf16_split2(s[2 * kk + 1][0], s[2 * kk + 1][1], h.z, l.z);
            bf16_split2(s[2 * kk + 1][2], s[2 * kk + 1][3], h.w, l.w);
            S.frag[mt][warp][2 * kk][lane] = h, S.frag[mt][warp][2 * kk + 1][lane] = l;
          }
        }
        if (t == 0)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr)
            S.m[warp][mt * 16 + g + 8 * hr] = mrun[hr], S.l[warp][mt * 16 + g + 8 * hr] = lrun[hr];
      }
      __syncthreads();
      // Blocks that saw a key of the row merge in order: M = max m_w, L = sum l_w f_w, f_w = exp(m_w - M), O alike.
      if (threadIdx.x < 16 * T) {
        const int m = threadIdx.x;
        float M = -INFINITY, L = 0.0f;
        int lead = -1;
        for (int w = 0; w < kWarps; ++w) {
          M = fmaxf(M, S.m[w][m]);
          if (lead < 0 && S.m[w][m] != -INFINITY) lead = w;
        }
        for (int w = 0; w < kWarps; ++w) {
          S.f[w][m] = S.m[w][m] == -INFINITY ? 0.0f : expf(S.m[w][m] - M);
          L = __fadd_rn(L, __fmul_rn(S.l[w][m], S.f[w][m]));
        }
        S.L[m] = L, S.Mx[m] = M;
        S.first[m] = lead;
      }
      __syncthreads();
      float acc[T][kDn][4] = {};  // every element is set by its lead block first
      if (kAhead && !kEarlyV && kb < n_keys) load_v(0, vnext);
#pragma unroll 1
      for (int w = 0; w < kWarps; ++w) {
        float vcur[2][kDn][4];
        const int64_t b0 = kb + 32 * w;
        if constexpr (kAhead) {
#pragma unroll
          for (int kk = 0; kk < 2; ++kk)
#pragma unroll
            for (int dd = 0; dd < kDn; ++dd)
#pragma unroll
              for (int i = 0; i < 4; ++i) vcur[kk][dd][i] = vnext[kk][dd][i];
          if (w + 1 < kWarps && b0 + 32 < n_keys) load_v(w + 1, vnext);
        }
        bool in_merge[T][2], any = false;
        int lead[T][2];
        float fw[T][2];  // read here, so the weighting after the mma does not wait on shared memory
#pragma unroll
        for (int mt = 0; mt < T; ++mt)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int m = mt * 16 + g + 8 * hr;
            in_merge[mt][hr] = S.m[w][m] != -INFINITY;  // a row no block of this chunk reached is never used
            lead[mt][hr] = S.first[m] < 0 ? 0 : S.first[m];
            fw[mt][hr] = S.f[w][m];
            any |= in_merge[mt][hr];
          }
        if (!__any_sync(0xffffffffu, any)) continue;
        float o[T][kDn][4] = {};
        if (b0 < n_keys) {
          if constexpr (!kAhead) load_v(w, vcur);
#pragma unroll
          for (int kk = 0; kk < 2; ++kk) {
            const int64_t j0 = b0 + 16 * kk + 2 * t;
            float vv[kDn][4];
            bool any_bad = false;
#pragma unroll
            for (int dd = 0; dd < kDn; ++dd)
#pragma unroll
              for (int i = 0; i < 4; ++i) {
                vv[dd][i] = vcur[kk][dd][i];
                any_bad |= !(fabsf(vv[dd][i]) < 3.38e38f);  // NaN, inf, or rounding to an infinite bf16
              }
            if (!__any_sync(0xffffffffu, any_bad)) {  // the usual case: every value finite, nothing to mark
              uint32_t vs[kDn][4];
#pragma unroll
              for (int dd = 0; dd < kDn; ++dd) {
                bf16_split2_finite(vv[dd][0], vv[dd][1], vs[dd][0], vs[dd][1]);
                bf16_split2_finite(vv[dd][2], vv[dd][3], vs[dd][2], vs[dd][3]);
              }
#pragma unroll
              for (int mt = 0; mt < T; ++mt) {
                const uint4 h = S.frag[mt][w][2 * kk][lane], l = S.frag[mt][w][2 * kk + 1][lane];
#pragma unroll
                for (int dd = 0; dd < kDn; ++dd) {
                  mma_m16n8k16(o[mt][dd], h.x, h.y, h.z, h.w, vs[dd][0], vs[dd][2]);
                  mma_m16n8k16(o[mt][dd], h.x, h.y, h.z, h.w, vs[dd][1], vs[dd][3]);
                  mma_m16n8k16(o[mt][dd], l.x, l.y, l.z, l.w, vs[dd][0], vs[dd][2]);
                }
              }
              continue;
            }
            uint32_t vs[kDn][4], vb[kDn][2];
#pragma unroll
            for (int dd = 0; dd < kDn; ++dd) {
              float v[4];
              bool bad[4];
#pragma unroll
              for (int i = 0; i < 4; ++i) {  // values past bf16 enter as 0; rows whose keys hold one become NaN below
                v[i] = vv[dd][i];
                bad[i] = !isfinite(__bfloat162float(__float2bfloat16_rn(v[i])));
                if (bad[i]) v[i] = 0.0f;
              }
              bf16_split2(v[0], v[1], vs[dd][0], vs[dd][1]);
              bf16_split2(v[2], v[3], vs[dd][2], vs[dd][3]);
              vb[dd][0] = bf16_pair(bad[0], bad[1]), vb[dd][1] = bf16_pair(bad[2], bad[3]);
            }
#pragma unroll
            for (int mt = 0; mt < T; ++mt) {
              const uint4 h = S.frag[mt][w][2 * kk][lane], l = S.frag[mt][w][2 * kk + 1][lane];
              // The (row, key) pairs inside the causal limit, in P's A layout: a masked key's V never reaches a row.
              auto in = [&](int64_t j, int hr) { return j < lim[mt][hr] ? 1.0f : 0.0f; };
              const uint32_t mk[4] = {bf16_pair(in(j0, 0), in(j0 + 1, 0)), bf16_pair(in(j0, 1), in(j0 + 1, 1)),
                                      bf16_pair(in(j0 + 8, 0), in(j0 + 9, 0)), bf16_pair(in(j0 + 8, 1), in(j0 + 9, 1))};
#pragma unroll
              for (int dd = 0; dd < kDn; ++dd) {
                mma_m16n8k16(o[mt][dd], h.x, h.y, h.z, h.w, vs[dd][0], vs[dd][2]);
                mma_m16n8k16(o[mt][dd], h.x, h.y, h.z, h.w, vs[dd][1], vs[dd][3]);
                mma_m16n8k16(o[mt][dd], l.x, l.y, l.z, l.w, vs[dd][0], vs[dd][2]);
                // Per output: unmasked keys whose value is not finite.
                float hits[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                mma_m16n8k16(hits, mk[0], mk[1], mk[2], mk[3], vb[dd][0], vb[dd][1]);
#pragma unroll
                for (int e = 0; e < 4; ++e)
                  if (hits[e] > 0.0f) o[mt][dd][e] = __int_as_float(0x7fffffff);
              }
            }
          }
        }
#pragma unroll
        for (int mt = 0; mt < T; ++mt)
#pragma unroll
          for (int dd = 0; dd < kDn; ++dd)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              if (!in_merge[mt][e >> 1]) continue;
              const float v = __fmul_rn(o[mt][dd][e], fw[mt][e >> 1]);
              acc[mt][dd][e] = w == lead[mt][e >> 1] ? v : __fadd_rn(acc[mt][dd][e], v);
            }
      }
      if (part) {
        put(acc);
        __syncthreads();
        // Parked for the combine kernel; a row within chunk 0 is finished here (one chunk's fold is that chunk).
        for (int i = warp; i < __popc(act) * (D / 32); i += kWarps) {
          const int mm = __fns(act, 0, i / (D / 32) + 1), mt = mm / 16, m = mm % 16, d0 = (i % (D / 32)) * 32;
          const int h = kvh * G + m % G;
          const int64_t r = row0 + mt * RT + m / G, col = int64_t(h) * D + d0;
          float* pp = part + ((c * n_rows + r) * n_head + h) * (D + 2);
          if (lane == 0 && d0 == 0) pp[0] = S.Mx[mm], pp[1] = S.L[mm];
          pp[2 + d0 + lane] = S.o[mm][d0 + lane];
          if (c > 0 || row_keys(pos, r) > kChunkKeys) continue;
          store_row(S.o[mm][d0 + lane], S.L[mm], r, col, int64_t(n_head) * D, out, xs, xsum);
        }
      } else {
        // Fold into the running state: chunk 0 always, later chunks when they saw an unmasked key of the row.
        if (threadIdx.x < 16 * T) {
          const int m = threadIdx.x;
          S.take[m] = c == 0 || S.Mx[m] != -INFINITY;
          if (c == 0) {
            S.run_m[m] = S.Mx[m], S.run_l[m] = S.L[m];
          } else if (S.take[m]) {
            const FoldW fw = fold_weights(S.run_m[m], S.Mx[m]);
            S.run_l[m] = fold_value(S.run_l[m], S.L[m], fw), S.run_m[m] = fw.m, S.run_a[m] = fw.a, S.run_b[m] = fw.b;
          }
        }
        __syncthreads();
        // The running output stays in S.o, each element with the thread that owns it.
#pragma unroll
        for (int mt = 0; mt < T; ++mt)
#pragma unroll
          for (int dd = 0; dd < kDn; ++dd)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int m = mt * 16 + g + 8 * (e >> 1);
              float& r = S.o[m][(warp * kDn + dd) * 8 + 2 * t + (e & 1)];
              if (S.take[m])
                r = c == 0 ? acc[mt][dd][e] : fold_value(r, acc[mt][dd][e], FoldW{S.run_a[m], S.run_b[m], 0.0f});
            }
      }
      __syncthreads();
    }
    if (part) continue;
    // A warp per (M row, 32 columns), lane k on column k: coalesced stores, and the split for the output product.
    for (int i = warp; i < __popc(act) * (D / 32); i += kWarps) {
      const int mm = __fns(act, 0, i / (D / 32) + 1), mt = mm / 16, m = mm % 16, d0 = (i % (D / 32)) * 32;
      const int64_t r = row0 + mt * RT + m / G, col = (int64_t(kvh) * G + m % G) * D + d0;
      store_row(S.o[mm][d0 + lane], S.run_l[mm], r, col, int64_t(n_head) * D, out, xs, xsum);
    }
    __syncthreads();
  }
}

// A (row, head)'s chunks folded in order, a warp per 32 columns; at most n_chunks were written for any row.
template <int D>
__global__ void __launch_bounds__(128)
    attention_combine_kernel(const float* part, int64_t n_rows, const int32_t* pos, int n_head, int64_t chunks_written,
                             float* out, uint4* xs, float* xsum) {
  grid_wait();
  const int lane = threadIdx.x & 31, groups = D / 32;
  const int64_t task = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (task >= n_rows * n_head * groups) return;
  const int64_t r = task / (int64_t(n_head) * groups);
  const int h = int((task / groups) % n_head), d = int(task % groups) * 32 + lane;
  const int64_t keys_c = (row_keys(pos, r) + kChunkKeys - 1) / kChunkKeys;
  const int64_t n_chunks = keys_c < chunks_written ? keys_c : chunks_written;
  if (n_chunks <= 1) return;
  auto chunk = [&](int64_t c) { return part + ((c * n_rows + r) * n_head + h) * (D + 2); };
  float rm = chunk(0)[0], rl = chunk(0)[1], ro = chunk(0)[2 + d];
  for (int64_t k = 1; k < n_chunks; ++k) {
    const int64_t c = TF_DCTL(145) ? n_chunks - k : k;  // planted: the chunks folded in reverse order
    const float* pc = chunk(c);
    if (pc[0] == -INFINITY) continue;
    const FoldW fw = fold_weights(rm, pc[0]);
    rl = fold_value(rl, pc[1], fw), ro = fold_value(ro, pc[2 + d], fw), rm = fw.m;
  }
  store_row(ro, rl, r, int64_t(h) * D + d - lane, int64_t(n_head) * D, out, xs, xsum);
}

}  // namespace
}  // namespace tf::cuda
