// Tensor-core paged attention for every row count (decode, draft verify, prefill chunks): flash-style online softmax
// over 32-key blocks at absolute positions, Q K^T and P V as bf16 hi/lo mma products with f32 accumulation.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/cuda_ctl.cuh"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_stream.cuh"
#include "backend/cuda/mma_ops.cuh"
#include "backend/cuda/mma_split.cuh"
#include "backend/cuda/paged_kv.cuh"

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

// A block per 16 (row, head) pairs of one KV head and sequence pass; chunks walked here or one per blockIdx.z (part).
// All warps share a chunk's 32-key blocks (Q K^T by tile, P V by columns) with the arithmetic of one warp per block.
template <int D, int kMinBlocks>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    attention_mma_kernel(const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos, const int32_t* row_seq,
                         PagedKv kv, int n_head, int n_kv_head, float scale, float* out, uint4* xs, float* xsum,
                         float* part) {
  grid_wait();
  constexpr int kDn = D / 8 / kWarps;  // 8-column groups of P V per warp
  __shared__ float sm_m[kWarps][16], sm_l[kWarps][16], sm_f[kWarps][16], sm_L[16], sm_M[16];
  __shared__ int sm_first[16];
  __shared__ uint4 sm_frag[kWarps][4][32];  // per 32-key block: its four score tiles, then P's hi and lo fragments
  __shared__ float sm_o[16][D + 4];  // padded: rows D apart put a warp's 8 row groups on one bank (8-way conflicts)
  __shared__ float run_a[16], run_b[16], run_m[16], run_l[16];
  __shared__ bool run_take[16];
  const int G = n_head / n_kv_head, RT = 16 / G;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t row0 = int64_t(blockIdx.x) * RT;
  int kvh = blockIdx.y;
  const int kvh_read = (TF_DCTL(142) && n_kv_head > 1) ? (kvh + 1) % n_kv_head : kvh;  // planted: wrong KV head
  for (int first = 0; first < RT; ++first) {
    const int64_t fr = row0 + first;
    if (fr >= n_rows) break;
    const int seq = row_seq[fr];
    bool seen = false;
    for (int e = 0; e < first; ++e) seen |= row_seq[row0 + e] == seq;
    if (seen) continue;  // that sequence's pass already ran
    // This pass: the tile's rows of `seq`; M row m is (row m / G, head m % G).
    int64_t n_keys = 0;
    for (int e = first; e < RT && row0 + e < n_rows; ++e)
      if (row_seq[row0 + e] == seq) n_keys = max(n_keys, row_keys(pos, row0 + e));
    const int64_t n_chunks = n_keys > 0 ? (n_keys + kChunkKeys - 1) / kChunkKeys : 1;  // a pass always folds chunk 0
    if (part && int64_t(blockIdx.z) >= n_chunks) continue;  // this block's chunk holds none of the pass's keys
    int64_t lim[2];  // per M row of this lane: keys allowed (0: row not in the pass)
    uint32_t qh[D / 16][4], ql[D / 16][4];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int m = g + 8 * hr, e = m / G;
      const int64_t r = row0 + e;
      const bool act = m < RT * G && r < n_rows && row_seq[r] == seq;
      lim[hr] = act ? row_keys(pos, r) : 0;
      const float* qr = q + r * q_stride + (int64_t(kvh) * G + m % G) * D;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        float v[4] = {0, 0, 0, 0};
        if (act)
          v[0] = qr[16 * kk + 2 * t], v[1] = qr[16 * kk + 2 * t + 1], v[2] = qr[16 * kk + 2 * t + 8],
          v[3] = qr[16 * kk + 2 * t + 9];
        bf16_split2(v[0], v[1], qh[kk][hr], ql[kk][hr]);
        bf16_split2(v[2], v[3], qh[kk][2 + hr], ql[kk][2 + hr]);
      }
    }
    // This warp's columns of the chunk's merged output, as (M row, column).
    auto put = [&](const float(&x)[kDn][4]) {
#pragma unroll
      for (int dd = 0; dd < kDn; ++dd)
#pragma unroll
        for (int e = 0; e < 4; ++e) sm_o[g + 8 * (e >> 1)][(warp * kDn + dd) * 8 + 2 * t + (e & 1)] = x[dd][e];
    };
    float run[kDn][4];  // the pass's running output at this warp's columns
    const int64_t c_first = part ? int64_t(blockIdx.z) : 0, c_end = part ? c_first + 1 : n_chunks;
    for (int64_t c = c_first; c < c_end; ++c) {
      const int64_t kb = c * kChunkKeys;
      const int n_tiles = n_keys > kb ? int((min(kChunkKeys, n_keys - kb) + 7) / 8) : 0;
      // Q K^T by 8-key tile, none past the last key (the softmax masks those slots whatever they hold).
      for (int i = warp; i < n_tiles; i += kWarps) {
        const int64_t j = kb + 8 * i + g;
        const float* kr = kv_row_of(kv, seq, j < n_keys ? j : 0, false) + int64_t(kvh_read) * D;
        float2 ka[D / 16], kc[D / 16];
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          ka[kk] = *reinterpret_cast<const float2*>(kr + 16 * kk + 2 * t);
          kc[kk] = *reinterpret_cast<const float2*>(kr + 16 * kk + 2 * t + 8);
        }
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          uint32_t kh0, kl0, kh1, kl1;
          bf16_split2(ka[kk].x, ka[kk].y, kh0, kl0);
          bf16_split2(kc[kk].x, kc[kk].y, kh1, kl1);
          mma_m16n8k16(s, qh[kk][0], qh[kk][1], qh[kk][2], qh[kk][3], kh0, kh1);
          mma_m16n8k16(s, qh[kk][0], qh[kk][1], qh[kk][2], qh[kk][3], kl0, kl1);
          mma_m16n8k16(s, ql[kk][0], ql[kk][1], ql[kk][2], ql[kk][3], kh0, kh1);
        }
        sm_frag[i >> 2][i & 3][lane] =
            make_uint4(__float_as_uint(s[0]), __float_as_uint(s[1]), __float_as_uint(s[2]), __float_as_uint(s[3]));
      }
      __syncthreads();
      // Warp w's block: scaled, causally masked scores, its row maxima and sums, and P split into fragments.
      float mrun[2] = {-INFINITY, -INFINITY}, lrun[2] = {0.0f, 0.0f};
      if (kb + 32 * warp < n_keys) {
        float s[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const uint4 v = sm_frag[warp][nt][lane];
          s[nt][0] = __uint_as_float(v.x), s[nt][1] = __uint_as_float(v.y), s[nt][2] = __uint_as_float(v.z),
          s[nt][3] = __uint_as_float(v.w);
        }
        float bmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t j = kb + 32 * warp + nt * 8 + 2 * t + (e & 1);
            s[nt][e] = j < lim[e >> 1] ? __fmul_rn(s[nt][e], scale) : -INFINITY;
            bmax[e >> 1] = fmaxf(bmax[e >> 1], s[nt][e]);
          }
        float alpha[2];
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          bmax[hr] = fmaxf(bmax[hr], __shfl_xor_sync(0xffffffffu, bmax[hr], 1));
          bmax[hr] = fmaxf(bmax[hr], __shfl_xor_sync(0xffffffffu, bmax[hr], 2));
          const float mn = fmaxf(mrun[hr], bmax[hr]);
          alpha[hr] = mn == -INFINITY ? 1.0f : expf(mrun[hr] - mn);
          mrun[hr] = mn;
        }
        float rs[2] = {0.0f, 0.0f};
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[nt][e] = s[nt][e] == -INFINITY ? 0.0f : expf(s[nt][e] - mrun[e >> 1]);
            rs[e >> 1] = __fadd_rn(rs[e >> 1], s[nt][e]);
          }
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
          sm_frag[warp][2 * kk][lane] = h, sm_frag[warp][2 * kk + 1][lane] = l;
        }
      }
      if (t == 0)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) sm_m[warp][g + 8 * hr] = mrun[hr], sm_l[warp][g + 8 * hr] = lrun[hr];
      __syncthreads();
      // The blocks that saw an unmasked key of the row (all of them if none did) merge in block order: M = max m_w,
      // L = sum l_w f_w, O = sum o_w f_w, f_w = exp(m_w - M). A block's part depends only on the row's own limit.
      if (threadIdx.x < 16) {
        const int m = threadIdx.x;
        float M = -INFINITY, L = 0.0f;
        int lead = -1;
        for (int w = 0; w < kWarps; ++w) {
          M = fmaxf(M, sm_m[w][m]);
          if (lead < 0 && sm_m[w][m] != -INFINITY) lead = w;
        }
        for (int w = 0; w < kWarps; ++w) {
          sm_f[w][m] = sm_m[w][m] == -INFINITY ? 0.0f : expf(sm_m[w][m] - M);
          L = __fadd_rn(L, __fmul_rn(sm_l[w][m], sm_f[w][m]));
        }
        sm_L[m] = L, sm_M[m] = M;
        sm_first[m] = lead;
      }
      __syncthreads();
      float acc[kDn][4] = {};  // every element is set by its lead block first
#pragma unroll 1
      for (int w = 0; w < kWarps; ++w) {
        bool in_merge[2];
        int lead[2];
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int m = g + 8 * hr;
          in_merge[hr] = sm_first[m] < 0 || sm_m[w][m] != -INFINITY;
          lead[hr] = sm_first[m] < 0 ? 0 : sm_first[m];
        }
        if (!__any_sync(0xffffffffu, in_merge[0] || in_merge[1])) continue;
        float o[kDn][4];
#pragma unroll
        for (int dd = 0; dd < kDn; ++dd) o[dd][0] = o[dd][1] = o[dd][2] = o[dd][3] = 0.0f;
        const int64_t b0 = kb + 32 * w;
        if (b0 < n_keys) {
#pragma unroll
          for (int kk = 0; kk < 2; ++kk) {
            const uint4 h = sm_frag[w][2 * kk][lane], l = sm_frag[w][2 * kk + 1][lane];
            const int64_t j0 = b0 + 16 * kk + 2 * t;
            const float* vr[4];
            bool vin[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int64_t j = j0 + (i & 1) + 8 * (i >> 1);
              vin[i] = j < n_keys;
              vr[i] = kv_row_of(kv, seq, vin[i] ? j : 0, true) + int64_t(kvh_read) * D;
            }
            // The (row, key) pairs inside the causal limit, in P's A layout: a masked key's V never reaches a row.
            auto in = [&](int64_t j, int hr) { return j < lim[hr] ? 1.0f : 0.0f; };
            const uint32_t mk[4] = {bf16_pair(in(j0, 0), in(j0 + 1, 0)), bf16_pair(in(j0, 1), in(j0 + 1, 1)),
                                    bf16_pair(in(j0 + 8, 0), in(j0 + 9, 0)), bf16_pair(in(j0 + 8, 1), in(j0 + 9, 1))};
            float vv[kDn][4];
            bool any_bad = false;
#pragma unroll
            for (int dd = 0; dd < kDn; ++dd)
#pragma unroll
              for (int i = 0; i < 4; ++i) {
                vv[dd][i] = vin[i] ? vr[i][(warp * kDn + dd) * 8 + g] : 0.0f;
                any_bad |= !(fabsf(vv[dd][i]) < 3.38e38f);  // NaN, inf, or rounding to an infinite bf16
              }
            if (!__any_sync(0xffffffffu, any_bad)) {  // the usual case: every value finite, nothing to mark
#pragma unroll
              for (int dd = 0; dd < kDn; ++dd) {
                uint32_t vh0, vl0, vh1, vl1;
                bf16_split2_finite(vv[dd][0], vv[dd][1], vh0, vl0);
                bf16_split2_finite(vv[dd][2], vv[dd][3], vh1, vl1);
                mma_m16n8k16(o[dd], h.x, h.y, h.z, h.w, vh0, vh1);
                mma_m16n8k16(o[dd], h.x, h.y, h.z, h.w, vl0, vl1);
                mma_m16n8k16(o[dd], l.x, l.y, l.z, l.w, vh0, vh1);
              }
              continue;
            }
#pragma unroll
            for (int dd = 0; dd < kDn; ++dd) {
              float v[4];
              bool bad[4];
#pragma unroll
              for (int i = 0; i < 4; ++i) {  // non-finite values enter as 0; rows whose keys hold one become NaN below
                v[i] = vv[dd][i];
                bad[i] = !isfinite(v[i]);
                if (bad[i]) v[i] = 0.0f;
              }
              uint32_t vh0, vl0, vh1, vl1;
              bf16_split2(v[0], v[1], vh0, vl0);
              bf16_split2(v[2], v[3], vh1, vl1);
              mma_m16n8k16(o[dd], h.x, h.y, h.z, h.w, vh0, vh1);
              mma_m16n8k16(o[dd], h.x, h.y, h.z, h.w, vl0, vl1);
              mma_m16n8k16(o[dd], l.x, l.y, l.z, l.w, vh0, vh1);
              // Per output: unmasked keys whose value is not finite.
              float hits[4] = {0.0f, 0.0f, 0.0f, 0.0f};
              mma_m16n8k16(hits, mk[0], mk[1], mk[2], mk[3], bf16_pair(bad[0], bad[1]), bf16_pair(bad[2], bad[3]));
#pragma unroll
              for (int e = 0; e < 4; ++e)
                if (hits[e] > 0.0f) o[dd][e] = __int_as_float(0x7fffffff);
            }
          }
        }
#pragma unroll
        for (int dd = 0; dd < kDn; ++dd)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (!in_merge[e >> 1]) continue;
            const float v = __fmul_rn(o[dd][e], sm_f[w][g + 8 * (e >> 1)]);
            acc[dd][e] = w == lead[e >> 1] ? v : __fadd_rn(acc[dd][e], v);
          }
      }
      if (part) {
        put(acc);
        __syncthreads();
        // Parked for the combine kernel; a row within chunk 0 is finished here (one chunk's fold is that chunk).
        for (int i = warp; i < 16 * (D / 32); i += kWarps) {
          const int m = i / (D / 32), d0 = (i % (D / 32)) * 32, e = m / G, h = kvh * G + m % G;
          const int64_t r = row0 + e, col = int64_t(h) * D + d0;
          if (!(m < RT * G && r < n_rows && row_seq[r] == seq)) continue;
          float* pp = part + ((c * n_rows + r) * n_head + h) * (D + 2);
          if (lane == 0 && d0 == 0) pp[0] = sm_M[m], pp[1] = sm_L[m];
          pp[2 + d0 + lane] = sm_o[m][d0 + lane];
          if (c > 0 || row_keys(pos, r) > kChunkKeys) continue;
          store_row(sm_o[m][d0 + lane], sm_L[m], r, col, int64_t(n_head) * D, out, xs, xsum);
        }
      } else {
        // Fold into the running state: chunk 0 always, later chunks when they saw an unmasked key of the row.
        if (threadIdx.x < 16) {
          const int m = threadIdx.x;
          run_take[m] = c == 0 || sm_M[m] != -INFINITY;
          if (c == 0) {
            run_m[m] = sm_M[m], run_l[m] = sm_L[m];
          } else if (run_take[m]) {
            const FoldW fw = fold_weights(run_m[m], sm_M[m]);
            run_l[m] = fold_value(run_l[m], sm_L[m], fw), run_m[m] = fw.m, run_a[m] = fw.a, run_b[m] = fw.b;
          }
        }
        __syncthreads();
#pragma unroll
        for (int dd = 0; dd < kDn; ++dd)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int m = g + 8 * (e >> 1);
            if (run_take[m])
              run[dd][e] = c == 0 ? acc[dd][e] : fold_value(run[dd][e], acc[dd][e], FoldW{run_a[m], run_b[m], 0.0f});
          }
      }
      __syncthreads();
    }
    if (part) continue;
    put(run);
    __syncthreads();
    // A warp per (M row, 32 columns), lane k on column k: coalesced stores, and the split for the output product.
    for (int i = warp; i < 16 * (D / 32); i += kWarps) {
      const int m = i / (D / 32), d0 = (i % (D / 32)) * 32, e = m / G;
      const int64_t r = row0 + e, col = (int64_t(kvh) * G + m % G) * D + d0;
      if (!(m < RT * G && r < n_rows && row_seq[r] == seq)) continue;
      store_row(sm_o[m][d0 + lane], run_l[m], r, col, int64_t(n_head) * D, out, xs, xsum);
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

std::atomic<int> g_blocks_per_sm{0};

}  // namespace

void attention_set_blocks_per_sm(int n) { g_blocks_per_sm.store(n == 1 || n == 2 ? n : 0); }

bool attention_mma_supports(int64_t head_dim, int64_t n_head, int64_t n_kv_head) {
  return (head_dim == 64 || head_dim == 128) && n_kv_head > 0 && n_head % n_kv_head == 0 && n_head / n_kv_head <= 16;
}

void attention_mma(const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos, const int32_t* row_seq,
                   const PagedKv& kv, int64_t n_head, int64_t n_kv_head, int64_t head_dim, float scale, float* out,
                   void* xs, float* xsum, const AttnChunks& chunks) {
  if (!attention_mma_supports(head_dim, n_head, n_kv_head))
    throw std::runtime_error(
        "attention: the tensor-core kernel takes head size 64 or 128 and up to 16 heads per KV head");
  if (n_rows == 0) return;
  upload_control();
  const int64_t rt = 16 / (n_head / n_kv_head);
  // Few rows over several chunks: a block per chunk, then the combine kernel (the bits of the in-block walk).
  const int64_t n_chunks = (chunks.max_keys + kChunkKeys - 1) / kChunkKeys;
  const bool parallel = chunks.part && n_rows <= chunks.max_rows && n_chunks > 1;
  if (parallel && n_chunks > chunks.max_chunks)
    throw std::runtime_error("CUDA attention: more key chunks than the partials were sized for");
  float* part = parallel ? chunks.part : nullptr;
  const dim3 grid(unsigned((n_rows + rt - 1) / rt), unsigned(n_kv_head), unsigned(parallel ? n_chunks : 1));
  auto* x4 = static_cast<uint4*>(xs);
  // Many row blocks (prefill): two blocks an SM at 128 registers, so one block's barriers and chains hide the other's.
  static const int64_t sms = device_info(0).sm_count;
  const int forced = g_blocks_per_sm.load();
  const bool two = forced ? forced == 2 : int64_t(grid.x) * grid.y * grid.z > sms;
  auto go = [&](auto kernel) {
    launch_k(kernel, grid, kWarps * 32, 0, q, q_stride, n_rows, pos, row_seq, kv, int(n_head), int(n_kv_head), scale,
             out, x4, xsum, part);
  };
  if (head_dim == 64)
    two ? go(attention_mma_kernel<64, 2>) : go(attention_mma_kernel<64, 1>);
  else
    two ? go(attention_mma_kernel<128, 2>) : go(attention_mma_kernel<128, 1>);
  if (parallel) {
    const int64_t warps = n_rows * n_head * (head_dim / 32);
    const unsigned blocks = unsigned((warps + 3) / 4);
    if (head_dim == 64)
      launch_k(attention_combine_kernel<64>, blocks, 128, 0, part, n_rows, pos, int(n_head), n_chunks, out, x4, xsum);
    else
      launch_k(attention_combine_kernel<128>, blocks, 128, 0, part, n_rows, pos, int(n_head), n_chunks, out, x4, xsum);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA attention: ") + cudaGetErrorString(e));
}

size_t attention_chunk_bytes(int64_t max_rows, int64_t n_head, int64_t head_dim, int64_t max_keys) {
  return size_t(max_rows * n_head * ((max_keys + kChunkKeys - 1) / kChunkKeys) * (head_dim + 2)) * sizeof(float);
}

}  // namespace tf::cuda
