// Prompt rows' attention by warpgroup mma over keys converted once a call: the block kernel's float steps, so its
// bits, with each 32-key tile's K and V^T laid out as wgmma reads them and brought in by bulk copies.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/attention_f16.cuh"
#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/cuda_stream.cuh"
#include "backend/cuda/paged_kv.cuh"
#include "backend/cuda/wgmma_ops.cuh"

namespace tf::cuda {
namespace {

constexpr int kWgStages = 4;                // steps of two tiles in flight
constexpr int kWgThreads = 128 + kFW * 32;  // a producer warpgroup and two warpgroups of query warps

// A 32-key tile: four groups of 8 keys, each K's cores (8 keys x 8 dims, 16 bytes a key) by dims, then V^T's cores
// (8 dims x 8 keys) by dims; so scores and P V both read K-major operands without a swizzle.
template <int D>
__host__ __device__ constexpr uint32_t tile_bytes() {
  return 128u * D;
}
template <int D>
__host__ __device__ constexpr uint32_t group_bytes() {
  return 32u * D;
}
template <int D>
__host__ __device__ constexpr uint32_t stage_bytes() {  // two tiles, then their 64 key factors and 64 value factors
  return 2 * tile_bytes<D>() + 4 * kFK * 4;
}
template <int D>
constexpr size_t wg_smem_bytes() {
  return size_t(kWgStages) * stage_bytes<D>() + 16 * kWgStages;
}

// The scratch (PromptKeys): [kv head][32-key slot tile] tiles, then key factors and value factors [kv head][slot].
struct KeyTiles {
  uint8_t* kv;
  float *kf, *vf;
};
__device__ __forceinline__ KeyTiles key_tiles(void* scratch, int64_t slots, int n_kv_head, int D) {
  uint8_t* kv = static_cast<uint8_t*>(scratch);
  float* kf = reinterpret_cast<float*>(kv + int64_t(n_kv_head) * slots * 4 * D);
  return {kv, kf, kf + int64_t(n_kv_head) * slots};
}

// One 32-key tile of a sequence and KV head (blockIdx), converted as the block kernel converts its own, into its slots.
template <int D>
__global__ void __launch_bounds__(kFW * 32) attention_wg_keys_kernel(PagedKv kv, PromptKeys pk, int n_kv_head) {
  grid_wait();  // the keys are the previous kernels'
  const int s = int(blockIdx.y), kvh = int(blockIdx.z), keys = pk.keys[s];
  if (int(blockIdx.x & ~1u) * kFK >= keys) return;  // a tile pair's second tile is written, zeros past the keys
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
  const KeyTiles im = key_tiles(pk.scratch, pk.slots, n_kv_head, D);
  const int64_t tile = int64_t(kvh) * (pk.slots / kFK) + pk.slot[s] / kFK + blockIdx.x;
  // The tile is laid out in shared memory first (V^T's halves land 2 bytes apart), then stored 16 bytes a thread.
  __shared__ __align__(16) uint8_t tl[tile_bytes<D>()];
  uint8_t* grp = tl + (jl / 8) * group_bytes<D>();
#pragma unroll
  for (int i = 0; i < D / 32; ++i) {
    const int d0 = 4 * c8 + 32 * i;
    *reinterpret_cast<uint2*>(grp + (d0 / 8) * 128 + (jl % 8) * 16 + (d0 % 8) * 2) = hk[i];
    const __half* h = reinterpret_cast<const __half*>(&hv[i]);
#pragma unroll
    for (int e = 0; e < 4; ++e)
      *reinterpret_cast<__half*>(grp + 16 * D + ((d0 + e) / 8) * 128 + ((d0 + e) % 8) * 16 + (jl % 8) * 2) = h[e];
  }
  __syncthreads();
  uint4* dst = reinterpret_cast<uint4*>(im.kv + tile * tile_bytes<D>());
#pragma unroll
  for (int i = 0; i < int(tile_bytes<D>() / 16) / (kFW * 32); ++i)
    dst[threadIdx.x + i * kFW * 32] = reinterpret_cast<const uint4*>(tl)[threadIdx.x + i * kFW * 32];
  if (c8 == 0) {
    const int64_t row = int64_t(kvh) * pk.slots + pk.slot[s] + j;
    im.kf[row] = kf, im.vf[row] = vf;
  }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Registers a wgmma reads or writes in flight, pinned around its fence and wait so that no access crosses them.
template <int N>
__device__ __forceinline__ void pin(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void pin(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}
// A no-swizzle shared-memory operand: lbo between cores along k, sbo between cores along m or n.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3ffff) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32);
}
#endif

// The block kernel's rows (16 RW rows x HB heads of a KV head, a warp each, here two warpgroups) and a producer.
// Each step brings a tile pair by bulk copy; a warpgroup takes both tiles' scores by one wgmma chain, issued a step
// ahead so that it runs beside the softmax, then the step's softmax and P V, as the block kernel does.
template <int D>
__global__ void __launch_bounds__(kWgThreads, 1)
    attention_wg_kernel(const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos, const int32_t* row_seq,
                        int n_head, int n_kv_head, float scale, float* out, PromptKeys pk) {
  grid_wait();  // Q and the converted keys are the previous kernels'
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) uint8_t sm[];
  constexpr uint32_t kTile = tile_bytes<D>(), kStage = stage_bytes<D>(), kGroup = group_bytes<D>();
  const uint32_t base = uint32_t(__cvta_generic_to_shared(sm)), full0 = base + kWgStages * kStage;
  const uint32_t empty0 = full0 + 8 * kWgStages;
  const int G = n_head / n_kv_head, HB = min(G, kFW), RW = kFW / HB, HG = (G + HB - 1) / HB;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, kvh = int(blockIdx.y) / HG, rows_b = 16 * RW;
  const int64_t row0 = int64_t(blockIdx.x) * rows_b;
  __shared__ BlockPasses bp;
  if (threadIdx.x == 0) {
    for (int b = 0; b < kWgStages; ++b) mbar_init(full0 + 8 * b), mbar_init_count(empty0 + 8 * b, kFW);
    mbar_init_fence();
  }
  const int n_pass =
      find_passes<kWgThreads / 32>(bp, pos, row_seq, row0, rows_b, n_rows);  // its barriers publish the mbarriers too
  auto for_passes = [&](auto&& pass) {
    for (int k = 0; k < n_pass; ++k) pass(bp.p_seq[k], bp.p_keys[k]);
  };
  if (warp < 4) {  // one thread starts every copy, a step into stage step % kWgStages once it was released
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");  // its registers go to the query warps
    if (threadIdx.x == 0) {
      const KeyTiles im = key_tiles(pk.scratch, pk.slots, n_kv_head, D);
      int step = 0;
      for_passes([&](int seq, int n_keys) {
        const int n_steps = (n_keys + 2 * kFK - 1) / (2 * kFK);
        const int64_t t0 = int64_t(kvh) * (pk.slots / kFK) + pk.slot[seq] / kFK;
        const int64_t f0 = int64_t(kvh) * pk.slots + pk.slot[seq];
        const bool swap = TF_DCTL(210);  // planted: key and value factors swapped
        for (int st = 0; st < n_steps; ++st, ++step) {
          const uint32_t b = uint32_t(step % kWgStages), at = base + b * kStage, full = full0 + 8 * b;
          if (step >= kWgStages) {  // the query warps' reads of the stage, ordered before the copies refill it
            mbar_wait(empty0 + 8 * b, uint32_t((step / kWgStages - 1) & 1));
            async_proxy_fence();
          }
          mbar_expect(full, kStage);  // both tiles of a pair: a sequence's slots are whole pairs
          bulk_copy(at, im.kv + (t0 + 2 * st) * kTile, 2 * kTile, full);
          bulk_copy(at + 2 * kTile, (swap ? im.vf : im.kf) + f0 + 2 * kFK * st, 2 * kFK * 4, full);
          bulk_copy(at + 2 * kTile + 2 * kFK * 4, (swap ? im.kf : im.vf) + f0 + 2 * kFK * st, 2 * kFK * 4, full);
        }
      });
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int cw = warp - 4, wg = cw >> 2, g = lane >> 2;  // the block kernel's warp cw
  const int head_in = int(blockIdx.y) % HG * HB + cw % HB;
  const bool active = cw < RW * HB && head_in < G;
  const int head = kvh * G + head_in;
  const int64_t wrow0 = row0 + 16 * (cw / HB), width = int64_t(n_head) * D;
  const float sl = __fmul_rn(scale, 1.44269504088896341f);  // scores in log2 units: the softmax runs on exp2
  int step = 0;
  for_passes([&](int seq, int n_keys) {
    int lim[2], wgk = 0;  // each row's keys; the warpgroup's most, past which its tiles are masked for every row
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = 16 * (cw / HB) + g + 8 * hr;
      lim[hr] = active && bp.r_seq[r] == seq ? bp.r_keys[r] : 0;
    }
    for (int w = 4 * wg; w < 4 * wg + 4; ++w) {  // lane g's rows of each warp of the group
      if (w >= RW * HB || int(blockIdx.y) % HG * HB + w % HB >= G) continue;
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = 16 * (w / HB) + g + 8 * hr;
        if (bp.r_seq[r] == seq) wgk = max(wgk, bp.r_keys[r]);
      }
    }
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) wgk = max(wgk, __shfl_xor_sync(0xffffffffu, wgk, off));
    uint32_t qa[D / 16][4];
    float qf[2];
    query_fragments<D>(q, q_stride, n_rows, wrow0, head, lim, sl, TF_DCTL(213), qa, qf);  // planted: neighbour's Q
    float o[D / 2], mrun[2] = {-INFINITY, -INFINITY}, lrun[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
    auto& o4 = *reinterpret_cast<float(*)[D / 8][4]>(o);  // the mma layout: 8 columns, 4 values a thread
    // Steps of two tiles; those past the warpgroup's last key are only released. Broadcast: ptxas must see it uniform.
    const int n_steps = (n_keys + 2 * kFK - 1) / (2 * kFK);
    const int n_act = __shfl_sync(0xffffffffu, min(n_steps, (wgk + 2 * kFK - 1) / (2 * kFK)), 0);
    auto release = [&](int st) {  // this warp no longer reads step st's stage
      __syncwarp();
      if (lane == 0) mbar_arrive(empty0 + 8 * uint32_t((step + st) % kWgStages));
    };
    auto issue_scores = [&](float(&d)[32], int st) {  // both tiles' scores as one group: the block kernel's chain
      const uint32_t b = uint32_t((step + st) % kWgStages), at = base + b * kStage;
      mbar_wait(full0 + 8 * b, uint32_t(((step + st) / kWgStages) & 1));
      // No pins here: ptxas serialises every wgmma past a write of a register of a group in flight.
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {  // dims 16 ks..; the first without an accumulator, which d may not hold
        wgmma_f16<64>(d, qa[ks], smem_desc(at + 256 * ks, 128, kGroup), ks > 0);
        if (TF_DCTL(212)) {  // planted: the score chain kept in fp16
          asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;" ::: "memory");
          pin(d);
#pragma unroll
          for (int i = 0; i < 32; ++i) d[i] = __half2float(__float2half_rn(d[i]));
          pin(d);
          asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        }
      }
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    };
    // P V of step st, committed: o is rescaled already and no other group is in flight. lose: its last 16 keys.
    auto issue_pv = [&](uint32_t(&pa)[4][4], int st, bool lose) {
      const uint32_t at = base + uint32_t((step + st) % kWgStages) * kStage;
      pin(o), pin(pa);
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {  // keys 16 kk..: V^T's cores of tile kk / 2, groups along k, dims along n
        if (lose && kk == 3) break;
        const uint32_t v = at + (kk / 2) * kTile + 2 * (kk % 2) * kGroup + 16 * D;
        if constexpr (D == 128) {
          wgmma_f16<128>(o, pa[kk], smem_desc(v, kGroup, 128), 1);
        } else {  // two halves of 32 dims: at m64n64 ptxas gave P the registers Q keeps for the next step
          wgmma_f16<32>(*reinterpret_cast<float(*)[16]>(o), pa[kk], smem_desc(v, kGroup, 128), 1);
          wgmma_f16<32>(*reinterpret_cast<float(*)[16]>(o + 16), pa[kk], smem_desc(v + 512, kGroup, 128), 1);
        }
      }
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    };
    // Step st on its scores s, with the next step's scores issued into nx first so they run beside this softmax; then
    // P V of the step's 64 keys, waited for.
    auto body = [&](float(&s)[32], float(&nx)[32], int st) {
      if (st + 1 < n_act) issue_scores(nx, st + 1);
      const float* kf_s = reinterpret_cast<const float*>(sm + uint32_t((step + st) % kWgStages) * kStage + 2 * kTile);
      const float* vf_s = kf_s + 2 * kFK;
      float alpha[2], su[2][4][4];  // a copy: s stays the wgmma's until its next scores are issued into it
#pragma unroll
      for (int i = 0; i < 32; ++i) su[i / 16][i / 4 % 4][i % 4] = s[i];
      const int kt = 2 * kFK * st;
      pair_softmax(su, kf_s, kt, lim, qf, mrun, lrun, alpha);
      uint32_t pa[4][4];
#pragma unroll
      for (int u = 0; u < 2; ++u)
        p_fragments(su[u], vf_s + kFK * u, false, *reinterpret_cast<uint32_t(*)[2][4]>(pa[2 * u]));
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");  // the next step's scores
      pin(nx);
      const bool any_done = __any_sync(0xffffffffu, kt >= lim[0] || kt >= lim[1]);
      const uint64_t neg0 = any_done ? negative_zeros<D>(o4, kt, lim) : 0;
      rescale<D>(o4, alpha);
      issue_pv(pa, st, TF_DCTL(211));  // planted 211: a step's last 16 keys lost
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
      pin(o);
      if (any_done) restore_negative_zeros<D>(o4, neg0);
      release(st);
    };
    float da[32], db[32];
    if (n_act > 0) {
      issue_scores(da, 0);
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
      pin(da);
    }
    for (int st = 0; st < n_act; st += 2) {  // by twos, so that the score buffers swap without a copy
      body(da, db, st);
      if (st + 1 < n_act) body(db, da, st + 1);
    }
    for (int st = n_act; st < n_steps; ++st) {  // steps with no key of this warpgroup's rows: waited, released
      mbar_wait(full0 + 8 * uint32_t((step + st) % kWgStages), uint32_t(((step + st) / kWgStages) & 1));
      release(st);
    }
    step += n_steps;
    write_rows<D>(o4, lrun, lim, wrow0, n_rows, width, head, TF_DCTL(214), out);  // planted 214: last row one late
  });
#endif
}

template <int D>
bool wg_ready() {
  static const bool ready = sm90a_ready(attention_wg_kernel<D>, int(wg_smem_bytes<D>()));
  return ready;
}

template <int D>
void launch_wg(const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos, const int32_t* row_seq,
               const PagedKv& kv, int n_head, int n_kv_head, float scale, float* out, const PromptKeys& pk) {
  const int G = n_head / n_kv_head, HB = std::min(G, kFW), RW = kFW / HB, HG = (G + HB - 1) / HB;
  launch_k(attention_wg_keys_kernel<D>,
           dim3(unsigned(pk.max_tiles + 1) & ~1u, unsigned(pk.n_seqs), unsigned(n_kv_head)), kFW * 32, 0, kv, pk,
           n_kv_head);
  const dim3 grid(unsigned((n_rows + 16 * RW - 1) / (16 * RW)), unsigned(n_kv_head * HG));
  launch_k(attention_wg_kernel<D>, grid, kWgThreads, wg_smem_bytes<D>(), q, q_stride, n_rows, pos, row_seq, n_head,
           n_kv_head, scale, out, pk);
}

}  // namespace

bool attention_wg_prompt(const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos, const int32_t* row_seq,
                         const PagedKv& kv, int n_head, int n_kv_head, int head_dim, float scale, float* out,
                         const PromptKeys& pk) {
  if (head_dim == 64 ? !wg_ready<64>() : !wg_ready<128>()) return false;
  upload_control();
  (head_dim == 64 ? launch_wg<64> : launch_wg<128>)(q, q_stride, n_rows, pos, row_seq, kv, n_head, n_kv_head, scale,
                                                    out, pk);
  return true;
}

}  // namespace tf::cuda
