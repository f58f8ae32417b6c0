#pragma once
// What both prompt attention kernels share: the fp16 rounding of keys, values and queries under powers of two, and
// the causal limit, so the block kernel and the warpgroup kernel cannot drift apart.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/cuda_ctl.cuh"
#include "backend/cuda/mma_ops.cuh"

namespace tf::cuda {

constexpr int kFW = 8;   // query warps a block: 16 rows of one head each
constexpr int kFK = 32;  // keys a tile

// 2^x flushed to +0 below 2^-126, for P only: fp16 P (values scaled by at most 2^15) and row sums of at least 1
// absorb exp2f's subnormal results; the rescaling factor keeps exp2f, as o times it need not be absorbed.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float pow2(int e) { return __int_as_float((e + 127) << 23); }  // e in [-126, 127]
// floor(log2 m) for a finite m > 0, subnormals included, without a branch.
__device__ __forceinline__ int log2_floor(float m) {
  const bool sub = m < 0x1p-126f;
  return ((__float_as_int(sub ? m * 0x1p64f : m) >> 23) & 0xff) - 127 - (sub ? 64 : 0);
}
// The power of two that puts m = max |x| (finite) into [2^14, 2^15), at most 2^126; 1 for m = 0.
__device__ __forceinline__ int fit_exp(float m) { return m > 0.0f ? min(14 - log2_floor(m), 126) : 0; }
// |x| where x is finite, else infinity (NaN included), so one maximum also tells a non-finite element.
__device__ __forceinline__ float fin_abs(float x) {
  const float a = fabsf(x);
  return a <= 0x1.fffffep127f ? a : INFINITY;
}
__device__ __forceinline__ float fin_abs_max4(float4 v) {
  return fmaxf(fmaxf(fin_abs(v.x), fin_abs(v.y)), fmaxf(fin_abs(v.z), fin_abs(v.w)));
}
// Keys a row attends (planted 201: one past its causal limit).
__device__ __forceinline__ int prompt_row_keys(const int32_t* pos, int64_t r) {
  return pos[r] + 1 + (TF_DCTL(201) ? 1 : 0);
}

// A block's rows (sequence, keys) and its passes (a sequence each, in order of first row, with its most keys), found
// once in shared memory: a scan of the rows by every warp is rows squared dependent global reads.
struct BlockPasses {
  int r_seq[16 * kFW], r_keys[16 * kFW], p_seq[16 * kFW], p_keys[16 * kFW], count[16];
};
// Every thread of the block (kWarps warps) calls it: it synchronises the block three times. Returns the passes' count.
template <int kWarps>
__device__ __forceinline__ int find_passes(BlockPasses& bp, const int32_t* pos, const int32_t* row_seq, int64_t row0,
                                           int rows_b, int64_t n_rows) {
  static_assert(kWarps <= 16 && 32 * kWarps >= 16 * kFW, "a thread a row, a count a warp");
  const int t = int(threadIdx.x), lane = t & 31, warp = t >> 5;
  if (t < rows_b) {
    const bool in = row0 + t < n_rows;
    bp.r_seq[t] = in ? row_seq[row0 + t] : -1, bp.r_keys[t] = in ? prompt_row_keys(pos, row0 + t) : 0;
  }
  __syncthreads();
  bool first = false;
  int keys = 0;
  if (t < rows_b && bp.r_seq[t] >= 0) {
    first = true;
    for (int e = 0; e < rows_b; ++e) {
      first &= !(e < t && bp.r_seq[e] == bp.r_seq[t]);
      keys = bp.r_seq[e] == bp.r_seq[t] && e >= t ? max(keys, bp.r_keys[e]) : keys;
    }
  }
  const unsigned firsts = __ballot_sync(0xffffffffu, first);
  if (lane == 0) bp.count[warp] = __popc(firsts);
  __syncthreads();
  int at = __popc(firsts & ((1u << lane) - 1u)), n_pass = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) at += w < warp ? bp.count[w] : 0, n_pass += bp.count[w];
  if (first) bp.p_seq[at] = bp.r_seq[t], bp.p_keys[at] = keys;
  __syncthreads();
  return n_pass;
}

// A key row by its 8 lanes: K into [2^14, 2^15), V only down, 2^-ek, 2^-ev back; past 2^64, 2^30 or inf/NaN: 0, NaN.
template <int D>
__device__ __forceinline__ void convert_row(const float4 (&kr)[D / 32], const float4 (&vr)[D / 32], uint2 (&hk)[D / 32],
                                            uint2 (&hv)[D / 32], float& kf, float& vf) {
  float mk = 0.0f, mv = 0.0f;
#pragma unroll
  for (int i = 0; i < D / 32; ++i) mk = fmaxf(mk, fin_abs_max4(kr[i])), mv = fmaxf(mv, fin_abs_max4(vr[i]));
#pragma unroll
  for (int off = 4; off > 0; off >>= 1) {
    mk = fmaxf(mk, __shfl_xor_sync(0xffffffffu, mk, off));
    mv = fmaxf(mv, __shfl_xor_sync(0xffffffffu, mv, off));
  }
  const bool bad = !(mk < 0x1p64f) || !(mv < 0x1p30f);
  const int ek = bad ? 0 : fit_exp(mk), ev = bad ? 0 : min(0, fit_exp(mv));
  const float fk = pow2(ek), fv = pow2(ev);
#pragma unroll
  for (int i = 0; i < D / 32; ++i) {
    hk[i] = bad ? make_uint2(0u, 0u)
                : make_uint2(half_pair(__fmul_rn(kr[i].x, fk), __fmul_rn(kr[i].y, fk)),
                             half_pair(__fmul_rn(kr[i].z, fk), __fmul_rn(kr[i].w, fk)));
    hv[i] = bad ? make_uint2(0u, 0u)
                : make_uint2(half_pair(__fmul_rn(vr[i].x, fv), __fmul_rn(vr[i].y, fv)),
                             half_pair(__fmul_rn(vr[i].z, fv), __fmul_rn(vr[i].w, fv)));
  }
  kf = bad ? (TF_DCTL(203) ? 1.0f : __int_as_float(0x7fffffff)) : pow2(-ek);  // planted 203: read as zeros
  vf = pow2(-ev);
}

// A warp's 16 rows of one head times sl in f32 as fp16 A fragments under their own powers of two, which qf takes off
// exactly; rows with no keys read as zeros. nb: the neighbour row's query.
template <int D>
__device__ __forceinline__ void query_fragments(const float* q, int64_t q_stride, int64_t n_rows, int64_t wrow0,
                                                int head, const int (&lim)[2], float sl, bool nb,
                                                uint32_t (&qa)[D / 16][4], float (&qf)[2]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float qv[2][D / 16][4], qm[2] = {0.0f, 0.0f};
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    int64_t r = wrow0 + g + 8 * hr;
    if (nb && r + 1 < n_rows) ++r;
    const float* qr = q + r * q_stride + int64_t(head) * D;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        qv[hr][kk][i] = lim[hr] > 0 ? __fmul_rn(qr[16 * kk + 2 * t + (i & 1) + 8 * (i >> 1)], sl) : 0.0f;
        qm[hr] = fmaxf(qm[hr], fabsf(qv[hr][kk][i]));
      }
    qm[hr] = fmaxf(qm[hr], __shfl_xor_sync(0xffffffffu, qm[hr], 1));
    qm[hr] = fmaxf(qm[hr], __shfl_xor_sync(0xffffffffu, qm[hr], 2));
  }
  float f[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int e = isfinite(qm[hr]) ? fit_exp(qm[hr]) : 0;
    f[hr] = pow2(e), qf[hr] = pow2(-e);
  }
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i)  // a0: row g, k 2t; a1: row g + 8; a2: row g, k 2t + 8; a3: row g + 8, k 2t + 8
      qa[kk][i] = half_pair(__fmul_rn(qv[i & 1][kk][2 * (i >> 1)], f[i & 1]),
                            __fmul_rn(qv[i & 1][kk][2 * (i >> 1) + 1], f[i & 1]));
}

// A step's two 32-key tiles of raw scores (mma layout, keys 32 u + 8 nt + 2 t + e) into P as one 64-key softmax step,
// with this lane's sums of its keys; kf, qf powers of two: the maximum is a score exactly, so a row's largest P is 1.
__device__ __forceinline__ void pair_softmax(float (&s)[2][4][4], const float* kf_pair, int kt, const int (&lim)[2],
                                             const float (&qf)[2], float (&mrun)[2], float (&lrun)[2],
                                             float (&alpha)[2]) {
  const int t = threadIdx.x & 3;
  float bmax[2] = {-INFINITY, -INFINITY}, rs[2] = {0.0f, 0.0f};
#pragma unroll
  for (int u = 0; u < 2; ++u)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const float2 kf = *reinterpret_cast<const float2*>(kf_pair + kFK * u + 8 * nt + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = kt + kFK * u + 8 * nt + 2 * t + (e & 1);
        s[u][nt][e] = j < lim[e >> 1] ? __fmul_rn(s[u][nt][e], (e & 1) ? kf.y : kf.x) : -INFINITY;
        bmax[e >> 1] = fmaxf(bmax[e >> 1], s[u][nt][e]);
      }
    }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {  // rounding is monotone, should a product leave the normal range
    bmax[hr] = fmaxf(bmax[hr], __shfl_xor_sync(0xffffffffu, bmax[hr], 1));
    bmax[hr] = fmaxf(bmax[hr], __shfl_xor_sync(0xffffffffu, bmax[hr], 2));
    const float mn = fmaxf(mrun[hr], __fmul_rn(bmax[hr], qf[hr]));
    alpha[hr] = mn == -INFINITY ? 1.0f : exp2f(mrun[hr] - mn);
    mrun[hr] = mn;
  }
#pragma unroll
  for (int u = 0; u < 2; ++u)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {  // a row yet to see a key has its P used nowhere
        s[u][nt][e] = exp2_ftz(__fmaf_rn(s[u][nt][e], qf[e >> 1], -mrun[e >> 1]));
        rs[e >> 1] = __fadd_rn(rs[e >> 1], s[u][nt][e]);
      }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) lrun[hr] = __fadd_rn(__fmul_rn(lrun[hr], alpha[hr]), rs[hr]);
}

// P times each key's 2^-ev (exact, at most 2^15) as A fragments, keys along k, 16 a step. lose: 2^-ev not applied.
__device__ __forceinline__ void p_fragments(const float (&s)[4][4], const float* vf_tile, bool lose,
                                            uint32_t (&pa)[2][4]) {
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int kk = 0; kk < 2; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int nt = 2 * kk + (i >> 1), e = 2 * (i & 1);
      const float2 v2 = *reinterpret_cast<const float2*>(vf_tile + 8 * nt + 2 * t);
      const float vf0 = lose ? 1.0f : v2.x, vf1 = lose ? 1.0f : v2.y;
      pa[kk][i] = half_pair(__fmul_rn(s[nt][e], vf0), __fmul_rn(s[nt][e + 1], vf1));
    }
}

// A row whose keys all lie before tile kt adds only zero products: its -0 outputs, to be kept bit for bit.
template <int D>
__device__ __forceinline__ uint64_t negative_zeros(const float (&o)[D / 8][4], int kt, const int (&lim)[2]) {
  uint64_t neg0 = 0;
  const bool done0 = kt >= lim[0], done1 = kt >= lim[1];
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (((e >> 1) ? done1 : done0) && __float_as_uint(o[nt][e]) == 0x80000000u) neg0 |= uint64_t(1) << (nt * 4 + e);
  return neg0;
}
template <int D>
__device__ __forceinline__ void restore_negative_zeros(float (&o)[D / 8][4], uint64_t neg0) {
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if ((neg0 >> (nt * 4 + e)) & 1) o[nt][e] = -0.0f;
}
// o times the tile's alpha, skipped where no row of the warp moved its maximum (times 1 changes no bit).
template <int D>
__device__ __forceinline__ void rescale(float (&o)[D / 8][4], const float (&alpha)[2]) {
  if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f))
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[nt][e] = __fmul_rn(o[nt][e], alpha[e >> 1]);
}
// The output row: o over the row's sum, its four lanes' running sums added.
template <int D>
__device__ __forceinline__ void write_rows(const float (&o)[D / 8][4], const float (&lrun)[2], const int (&lim)[2],
                                           int64_t wrow0, int64_t n_rows, int64_t width, int head, bool late,
                                           float* out) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float l[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {  // lanes t = 0..3 of a row: (0+1) + (2+3) in every lane
    l[hr] = __fadd_rn(lrun[hr], __shfl_xor_sync(0xffffffffu, lrun[hr], 1));
    l[hr] = __fadd_rn(l[hr], __shfl_xor_sync(0xffffffffu, l[hr], 2));
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    if (lim[hr] == 0) continue;
    int64_t r = wrow0 + g + 8 * hr;
    if (late && r == n_rows - 1) ++r;
    float* y = out + r * width + int64_t(head) * D + 2 * t;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      *reinterpret_cast<float2*>(y + 8 * nt) =
          make_float2(__fdiv_rn(o[nt][2 * hr], l[hr]), __fdiv_rn(o[nt][2 * hr + 1], l[hr]));
  }
}

// The warpgroup kernel with its keys kernel (attention_wg.cu); false where its sm_90a build did not load.
bool attention_wg_prompt(const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos, const int32_t* row_seq,
                         const PagedKv& kv, int n_head, int n_kv_head, int head_dim, float scale, float* out,
                         const PromptKeys& pk);

}  // namespace tf::cuda
