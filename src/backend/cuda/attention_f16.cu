// Prompt rows' paged attention at one fp16 mma a step: Q, K and V rounded to fp16 under powers of two, f32
// accumulation, an online softmax over 32-key tiles at absolute positions.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/cuda_ctl.cuh"
#include "backend/cuda/cuda_stream.cuh"
#include "backend/cuda/mma_ops.cuh"
#include "backend/cuda/paged_kv.cuh"
#include "backend/cuda/softmax_step.cuh"

namespace tf::cuda {
namespace {

constexpr int kFW = 8;   // warps a block
constexpr int kFK = 32;  // keys a tile

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
// 16 bytes from global into shared memory, or 16 zeros where !valid (src is then not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(uint32_t(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// All but this thread's newest n copy groups have landed.
template <int n>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(n) : "memory");
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

// The converted keys' scratch (PromptKeys): fp16 keys, values, then the two factors, each [kv head][slot].
struct KeyImage {
  __half *k, *v;
  float *kf, *vf;
};
__device__ __forceinline__ KeyImage key_image(void* scratch, int64_t slots, int64_t n_kv_head, int64_t D) {
  __half* k = static_cast<__half*>(scratch);
  float* kf = reinterpret_cast<float*>(k + 2 * n_kv_head * slots * D);
  return {k, k + n_kv_head * slots * D, kf, kf + n_kv_head * slots};
}

// NB tiles of fp16 keys and values (rows padded: ldmatrix's eight row addresses in distinct banks), their factors.
template <int D, int NB>
struct F16AttnSmem {
  __half k[NB][kFK][D + 8], v[NB][kFK][D + 8];
  float kf[NB][kFK], vf[NB][kFK];
};
constexpr int kConvBufs = 6;  // converted keys: three steps of two tiles

// One 32-key tile of a sequence and KV head (blockIdx), converted as the blocks convert theirs, into its slots.
template <int D>
__global__ void __launch_bounds__(kFW * 32) attention_f16_keys_kernel(PagedKv kv, PromptKeys pk, int n_kv_head) {
  grid_wait();  // the keys are the previous kernels'
  const int s = int(blockIdx.y), kvh = int(blockIdx.z), keys = pk.keys[s];
  if (int(blockIdx.x) * kFK >= keys) return;
  const int jl = threadIdx.x / 8, c8 = threadIdx.x % 8, j = int(blockIdx.x) * kFK + jl;
  float4 kr[D / 32], vr[D / 32];
#pragma unroll
  for (int i = 0; i < D / 32; ++i) kr[i] = vr[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (j < keys) {
    const int jr = TF_DCTL(209) && j + 1 < keys ? j + 1 : j;  // planted: the next position's key and value
    const float* kp = kv_row_of(kv, s, jr, false) + int64_t(kvh) * D + 4 * c8;
    const float* vp = kv_row_of(kv, s, jr, true) + int64_t(kvh) * D + 4 * c8;
#pragma unroll
    for (int i = 0; i < D / 32; ++i)
      kr[i] = *reinterpret_cast<const float4*>(kp + 32 * i), vr[i] = *reinterpret_cast<const float4*>(vp + 32 * i);
  }
  uint2 hk[D / 32], hv[D / 32];
  float kf, vf;
  convert_row<D>(kr, vr, hk, hv, kf, vf);
  const KeyImage im = key_image(pk.scratch, pk.slots, n_kv_head, D);
  const int64_t row = int64_t(kvh) * pk.slots + pk.slot[s] + j;
#pragma unroll
  for (int i = 0; i < D / 32; ++i) {
    *reinterpret_cast<uint2*>(im.k + row * D + 4 * c8 + 32 * i) = hk[i];
    *reinterpret_cast<uint2*>(im.v + row * D + 4 * c8 + 32 * i) = hv[i];
  }
  if (c8 == 0) im.kf[row] = kf, im.vf[row] = vf;
}

// A block: 16 RW rows of a sequence x HB heads of a KV head, a warp each; 32-key tiles converted once (kConv: copied).
template <int D, bool kConv>
__global__ void __launch_bounds__(kFW * 32, 1)
    attention_f16_kernel(const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos, const int32_t* row_seq,
                         PagedKv kv, int n_head, int n_kv_head, float scale, float* out, PromptKeys pk) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  constexpr int kBufs = kConv ? kConvBufs : 2;
  auto& S = *reinterpret_cast<F16AttnSmem<D, kBufs>*>(smem_raw);
  constexpr int kVec = D / 32;                       // float4s of a key row per lane: 8 lanes a row
  constexpr uint32_t kBufBytes = kFK * (D + 8) * 2;  // one tile's keys (or values) in shared memory
  const int G = n_head / n_kv_head, HB = min(G, kFW), RW = kFW / HB, HG = (G + HB - 1) / HB;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int kvh = int(blockIdx.y) / HG, head_in = int(blockIdx.y) % HG * HB + warp % HB;
  const int kvh_read = (TF_DCTL(202) && n_kv_head > 1) ? (kvh + 1) % n_kv_head : kvh;  // planted: wrong KV head
  const bool active = warp < RW * HB && head_in < G;
  const int head = kvh * G + head_in;
  const int rows_b = 16 * RW;
  const int64_t row0 = int64_t(blockIdx.x) * rows_b, wrow0 = row0 + 16 * (warp / HB);
  const int64_t width = int64_t(n_head) * D;
  bool waited = false;  // staged rows and positions precede the round, so the passes are found before waiting
  for (int first = 0; first < rows_b && row0 + first < n_rows; ++first) {
    const int seq = row_seq[row0 + first];
    bool seen = false;
    for (int e = 0; e < first; ++e) seen |= row_seq[row0 + e] == seq;
    if (seen) continue;  // that sequence's pass already ran
    int n_keys = 0;      // the pass's keys: the most any of its rows attends
    for (int e = first; e < rows_b && row0 + e < n_rows; ++e)
      if (row_seq[row0 + e] == seq) n_keys = max(n_keys, prompt_row_keys(pos, row0 + e));
    int lim[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int64_t r = wrow0 + g + 8 * hr;
      lim[hr] = active && r < n_rows && row_seq[r] == seq ? prompt_row_keys(pos, r) : 0;
    }
    int wkeys = max(lim[0], lim[1]);  // the warp's last key: later tiles are masked for all its rows
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) wkeys = max(wkeys, __shfl_xor_sync(0xffffffffu, wkeys, off));
    if (!waited) grid_wait(), waited = true;                  // Q and the keys are the previous kernels'
    const float sl = __fmul_rn(scale, 1.44269504088896341f);  // scores in log2 units: the softmax runs on exp2
    // Q as A fragments: each row (and head) under its own power of two, which the scores take off again.
    uint32_t qa[D / 16][4];
    float qf[2];
    {
      float qv[2][D / 16][4], qm[2] = {0.0f, 0.0f};
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        int64_t r = wrow0 + g + 8 * hr;
        if (TF_DCTL(207) && r + 1 < n_rows) ++r;  // planted: the neighbour row's query
        const float* qr = q + r * q_stride + int64_t(head) * D;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            qv[hr][kk][i] = lim[hr] > 0 ? qr[16 * kk + 2 * t + (i & 1) + 8 * (i >> 1)] : 0.0f;
            qm[hr] = fmaxf(qm[hr], fabsf(qv[hr][kk][i]));
          }
        qm[hr] = fmaxf(qm[hr], __shfl_xor_sync(0xffffffffu, qm[hr], 1));
        qm[hr] = fmaxf(qm[hr], __shfl_xor_sync(0xffffffffu, qm[hr], 2));
      }
      float f[2];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int e = isfinite(qm[hr]) ? fit_exp(qm[hr]) : 0;
        f[hr] = pow2(e), qf[hr] = __fmul_rn(sl, pow2(-e));
      }
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i)  // a0: row g, k 2t; a1: row g + 8; a2: row g, k 2t + 8; a3: row g + 8, k 2t + 8
          qa[kk][i] = half_pair(__fmul_rn(qv[i & 1][kk][2 * (i >> 1)], f[i & 1]),
                                __fmul_rn(qv[i & 1][kk][2 * (i >> 1) + 1], f[i & 1]));
    }
    float o[D / 8][4] = {}, mrun[2] = {-INFINITY, -INFINITY}, lrun[2] = {0.0f, 0.0f};
    const int jl = warp * (kFK / kFW) + lane / 8, c8 = lane % 8;  // the key row this lane converts, its eighth
    // Two tiles in flight in registers: a key row's page lookup and its loads are two dependent reads.
    auto load = [&](int tile, float4(&kr)[kVec], float4(&vr)[kVec]) {
      const int j = tile * kFK + jl;
#pragma unroll
      for (int i = 0; i < kVec; ++i) kr[i] = vr[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (j < n_keys) {
        const float* kp = kv_row_of(kv, seq, j, false) + int64_t(kvh_read) * D + 4 * c8;
        const float* vp = kv_row_of(kv, seq, j, true) + int64_t(kvh_read) * D + 4 * c8;
#pragma unroll
        for (int i = 0; i < kVec; ++i)
          kr[i] = *reinterpret_cast<const float4*>(kp + 32 * i), vr[i] = *reinterpret_cast<const float4*>(vp + 32 * i);
      }
    };
    auto convert = [&](int buf, const float4(&kr)[kVec], const float4(&vr)[kVec]) {
      uint2 hk[kVec], hv[kVec];
      float kf, vf;
      convert_row<D>(kr, vr, hk, hv, kf, vf);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        *reinterpret_cast<uint2*>(&S.k[buf][jl][4 * c8 + 32 * i]) = hk[i];
        *reinterpret_cast<uint2*>(&S.v[buf][jl][4 * c8 + 32 * i]) = hv[i];
      }
      if (c8 == 0) S.kf[buf][jl] = kf, S.vf[buf][jl] = vf;
    };
    const uint32_t kaddr = uint32_t(__cvta_generic_to_shared(&S.k[0][lane & 7][8 * (lane >> 3)]));
    const uint32_t vaddr =
        uint32_t(__cvta_generic_to_shared(&S.v[0][(lane & 7) + 8 * ((lane >> 3) & 1)][8 * (lane >> 4)]));
    // NT tiles in buffers b0.. from key kb: their scores together, then per tile in key order the softmax and P V
    // steps of one tile at a time, so a row's bits do not depend on NT.
    auto tiles_pass = [&](auto nt_count, int b0, int kb) {
      constexpr int NT = decltype(nt_count)::value;
      float s[NT][4][4] = {};
#pragma unroll
      for (int k2 = 0; k2 < D / 32; ++k2)
#pragma unroll
        for (int u = 0; u < NT; ++u)
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {  // keys 8 nt.., columns 32 k2 + 8 m for matrix m: two k-steps
            uint32_t b[4];
            ldsm_x4(b, kaddr + (b0 + u) * kBufBytes + (8 * nt * (D + 8) + 32 * k2) * 2);
            mma_m16n8k16_f16(s[u][nt], qa[2 * k2], b[0], b[1]);
            mma_m16n8k16_f16(s[u][nt], qa[2 * k2 + 1], b[2], b[3]);
            if (TF_DCTL(205))  // planted: the score chain kept in fp16
#pragma unroll
              for (int e = 0; e < 4; ++e) s[u][nt][e] = __half2float(__float2half_rn(s[u][nt][e]));
          }
      float alpha[NT][2];
#pragma unroll
      for (int u = 0; u < NT; ++u) {
        float bmax[2] = {-INFINITY, -INFINITY}, rs[2];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const float2 kf = *reinterpret_cast<const float2*>(&S.kf[b0 + u][8 * nt + 2 * t]);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int j = kb + kFK * u + 8 * nt + 2 * t + (e & 1);
            s[u][nt][e] =
                j < lim[e >> 1] ? __fmul_rn(__fmul_rn(s[u][nt][e], (e & 1) ? kf.y : kf.x), qf[e >> 1]) : -INFINITY;
            bmax[e >> 1] = fmaxf(bmax[e >> 1], s[u][nt][e]);
          }
        }
        softmax_rescale<true>(bmax, mrun, alpha[u]);
        softmax_exp<true>(s[u], mrun, rs);  // a row yet to see a key has its P used nowhere
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {  // lanes t = 0..3 of a row: (0+1) + (2+3) in every lane
          rs[hr] = __fadd_rn(rs[hr], __shfl_xor_sync(0xffffffffu, rs[hr], 1));
          rs[hr] = __fadd_rn(rs[hr], __shfl_xor_sync(0xffffffffu, rs[hr], 2));
          lrun[hr] = __fadd_rn(__fmul_rn(lrun[hr], alpha[u][hr]), rs[hr]);
        }
      }
#pragma unroll
      for (int u = 0; u < NT; ++u) {
        const int kt = kb + kFK * u;
        // P times each key's 2^-ev (exact, at most 2^15) as A fragments, keys along k, 16 a step.
        uint32_t pa[2][4];
#pragma unroll
        for (int kk = 0; kk < 2; ++kk)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int nt = 2 * kk + (i >> 1), e = 2 * (i & 1);
            const float2 v2 = *reinterpret_cast<const float2*>(&S.vf[b0 + u][8 * nt + 2 * t]);
            const float vf0 = TF_DCTL(208) ? 1.0f : v2.x, vf1 = TF_DCTL(208) ? 1.0f : v2.y;  // planted: 2^-ev lost
            pa[kk][i] = half_pair(__fmul_rn(s[u][nt][e], vf0), __fmul_rn(s[u][nt][e + 1], vf1));
          }
        // A row whose keys all lie before this tile adds only zero products: keep its -0 outputs bit for bit.
        const bool done0 = kt >= lim[0], done1 = kt >= lim[1];
        const bool any_done = __any_sync(0xffffffffu, done0 || done1);
        uint64_t neg0 = 0;
        if (any_done)
#pragma unroll
          for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              if (((e >> 1) ? done1 : done0) && __float_as_uint(o[nt][e]) == 0x80000000u)
                neg0 |= uint64_t(1) << (nt * 4 + e);
        if (__any_sync(0xffffffffu, alpha[u][0] != 1.0f || alpha[u][1] != 1.0f))  // times 1 changes no bit
#pragma unroll
          for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[nt][e] = __fmul_rn(o[nt][e], alpha[u][e >> 1]);
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          if (TF_DCTL(204) && kk == 1) break;  // planted: a tile's last 16 keys lost
#pragma unroll
          for (int n2 = 0; n2 < D / 16; ++n2) {  // keys 16 kk + 8 (m & 1).., columns 16 n2 + 8 (m >> 1)
            uint32_t b[4];
            ldsm_x4_trans(b, vaddr + (b0 + u) * kBufBytes + (16 * kk * (D + 8) + 16 * n2) * 2);
            mma_m16n8k16_f16(o[2 * n2], pa[kk], b[0], b[1]);
            mma_m16n8k16_f16(o[2 * n2 + 1], pa[kk], b[2], b[3]);
          }
        }
        if (any_done)
#pragma unroll
          for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              if ((neg0 >> (nt * 4 + e)) & 1) o[nt][e] = -0.0f;
      }
    };
    auto tile_pass = [&](int buf, int kb) { tiles_pass(std::integral_constant<int, 1>{}, buf, kb); };
    const int n_tiles = (n_keys + kFK - 1) / kFK;
    if constexpr (kConv) {
      const KeyImage im = key_image(pk.scratch, pk.slots, n_kv_head, D);
      const int64_t head0 = int64_t(kvh_read) * pk.slots + pk.slot[seq];
      // A tile's 16-byte pieces, zeros past the pass's keys as in the blocks' own tiles; its factors as converted.
      auto copy = [&](int tile, int buf) {
        if (tile < n_tiles) {
#pragma unroll
          for (int p = 0; p < D / 64; ++p) {
            const int c = int(threadIdx.x) + kFW * 32 * p, r = c / (D / 8), col = 8 * (c % (D / 8));
            const int j = tile * kFK + r;
            const int64_t at = (head0 + j) * D + col;
            cp_async16(&S.k[buf][r][col], j < n_keys ? im.k + at : im.k, j < n_keys);
            cp_async16(&S.v[buf][r][col], j < n_keys ? im.v + at : im.v, j < n_keys);
          }
          if (threadIdx.x < 16) {  // eight pieces of four factors each, of kf then vf
            const int c = threadIdx.x % 8;
            const int64_t at = head0 + tile * kFK + 4 * c;
            const bool kf = (threadIdx.x < 8) != TF_DCTL(210);  // planted: key and value factors swapped
            cp_async16(threadIdx.x < 8 ? &S.kf[buf][4 * c] : &S.vf[buf][4 * c], (kf ? im.kf : im.vf) + at, true);
          }
        }
      };
      // Steps of two tiles in three pairs of buffers: two steps in flight while one is multiplied.
      auto copy_step = [&](int st) {
        copy(2 * st, 2 * (st % 3));
        copy(2 * st + 1, 2 * (st % 3) + 1);
        cp_async_commit();
      };
      const int n_steps = (n_tiles + 1) / 2;
      copy_step(0);
      copy_step(1);
#pragma unroll 1
      for (int st = 0; st < n_steps; ++st) {
        cp_async_wait<1>();  // this thread's pieces of step st
        __syncthreads();     // everyone's; and no warp still reads step st - 1, whose buffers step st + 2 takes
        copy_step(st + 2);
        const int kb = 2 * st * kFK, b0 = 2 * (st % 3);
        if (active && 2 * st + 1 < n_tiles && kb + kFK < wkeys)
          tiles_pass(std::integral_constant<int, 2>{}, b0, kb);
        else if (active && kb < wkeys)
          tile_pass(b0, kb);
      }
      cp_async_wait<0>();
    } else {
      float4 kr0[kVec], vr0[kVec], kr1[kVec], vr1[kVec];
      if (n_tiles > 0) load(0, kr0, vr0);
      if (n_tiles > 1) load(1, kr1, vr1);
      auto step = [&](int it, float4(&kr)[kVec], float4(&vr)[kVec]) {
        convert(it & 1, kr, vr);
        if (it + 2 < n_tiles) load(it + 2, kr, vr);  // in flight while this tile and the next are multiplied
        __syncthreads();  // the tile is converted, and no warp still reads the buffer two tiles back
        if (active && it * kFK < wkeys) tile_pass(it & 1, it * kFK);
      };
#pragma unroll 1
      for (int it = 0; it < n_tiles; it += 2) {
        step(it, kr0, vr0);
        if (it + 1 < n_tiles) step(it + 1, kr1, vr1);
      }
    }
    __syncthreads();  // the next pass refills the buffers
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      if (lim[hr] == 0) continue;
      int64_t r = wrow0 + g + 8 * hr;
      if (TF_DCTL(206) && r == n_rows - 1) ++r;  // planted: the last row written one row late
      float* y = out + r * width + int64_t(head) * D + 2 * t;
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt)
        *reinterpret_cast<float2*>(y + 8 * nt) =
            make_float2(__fdiv_rn(o[nt][2 * hr], lrun[hr]), __fdiv_rn(o[nt][2 * hr + 1], lrun[hr]));
    }
  }
  if (!waited) grid_wait();
}

}  // namespace

bool attention_prompt_supports(int64_t head_dim, int64_t n_head, int64_t n_kv_head) {
  return (head_dim == 64 || head_dim == 128) && n_kv_head > 0 && n_head % n_kv_head == 0;
}

namespace {
std::atomic<int64_t> g_key_launches{0};  // for tests: that a round took the converted keys
}  // namespace

int64_t attention_prompt_key_launches() { return g_key_launches.load(); }

size_t attention_prompt_keys_bytes(int64_t slots, int64_t n_kv_head, int64_t head_dim) {
  return size_t(n_kv_head * slots) * (4 * size_t(head_dim) + 8);  // fp16 keys and values, two f32 factors
}

namespace {
template <int D, bool kConv>
void launch_f16(dim3 grid, const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos, const int32_t* row_seq,
                const PagedKv& kv, int n_head, int n_kv_head, float scale, float* out, const PromptKeys& pk) {
  constexpr int kBufs = kConv ? kConvBufs : 2;
  constexpr size_t bytes = sizeof(F16AttnSmem<D, kBufs>);
  static const cudaError_t ready =
      cudaFuncSetAttribute(attention_f16_kernel<D, kConv>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  cuda_check(ready, "prompt attention: shared memory");
  if constexpr (kConv) {
    launch_k(attention_f16_keys_kernel<D>, dim3(unsigned(pk.max_tiles), unsigned(pk.n_seqs), unsigned(n_kv_head)),
             kFW * 32, 0, kv, pk, n_kv_head);
    g_key_launches.fetch_add(1);
  }
  launch_k(attention_f16_kernel<D, kConv>, grid, kFW * 32, bytes, q, q_stride, n_rows, pos, row_seq, kv, n_head,
           n_kv_head, scale, out, pk);
}
}  // namespace

void attention_prompt(const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos, const int32_t* row_seq,
                      const PagedKv& kv, int64_t n_head, int64_t n_kv_head, int64_t head_dim, float scale, float* out,
                      const PromptKeys* keys) {
  if (!attention_prompt_supports(head_dim, n_head, n_kv_head))
    throw std::runtime_error(
        "attention: the fp16 prompt kernel takes head size 64 or 128 and whole groups of query "
        "heads per KV head, not head size " +
        std::to_string(head_dim) + " with " + std::to_string(n_head) + "/" + std::to_string(n_kv_head) + " heads");
  if (launch_device().major < 9)  // built for sm_90a and compute_90 only
    throw std::runtime_error("attention: the fp16 prompt kernel needs compute capability 9.0");
  const bool conv = keys && keys->scratch;
  if (conv && (keys->n_seqs <= 0 || keys->max_tiles <= 0 || keys->slots % kFK != 0 || !keys->slot || !keys->keys))
    throw std::logic_error("attention: converted prompt keys need sequences, tiles and a whole number of tiles' slots");
  if (n_rows == 0) return;
  upload_control();
  const int64_t G = n_head / n_kv_head, HB = std::min<int64_t>(G, kFW), RW = kFW / HB, HG = (G + HB - 1) / HB;
  const dim3 grid(unsigned((n_rows + 16 * RW - 1) / (16 * RW)), unsigned(n_kv_head * HG));
  const PromptKeys pk = conv ? *keys : PromptKeys{};
  auto go = [&](auto launch) {
    launch(grid, q, q_stride, n_rows, pos, row_seq, kv, int(n_head), int(n_kv_head), scale, out, pk);
  };
  if (head_dim == 64)
    conv ? go(launch_f16<64, true>) : go(launch_f16<64, false>);
  else
    conv ? go(launch_f16<128, true>) : go(launch_f16<128, false>);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA prompt attention: ") + cudaGetErrorString(e));
}

}  // namespace tf::cuda
