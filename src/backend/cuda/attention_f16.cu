// Prompt rows' paged attention at one fp16 mma a step: Q, K and V rounded to fp16 under powers of two, f32
// accumulation, an online softmax over 64-key steps at absolute positions. This block kernel converts its own tiles;
// with converted keys the warpgroup kernel of attention_wg.cu runs instead, to the same bits.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>

#include "backend/cuda/attention_f16.cuh"
#include "backend/cuda/cuda_stream.cuh"
#include "backend/cuda/paged_kv.cuh"

namespace tf::cuda {
namespace {

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

// Two steps of two tiles of fp16 keys and values (rows padded: ldmatrix's eight row addresses in distinct banks), their
// factors; a step's two tiles adjacent, so its 64 key factors are too.
template <int D>
struct F16AttnSmem {
  __half k[4][kFK][D + 8], v[4][kFK][D + 8];
  float kf[4][kFK], vf[4][kFK];
};

// A block: 16 RW rows of a sequence x HB heads of a KV head, a warp each; each step's two tiles converted by the block.
template <int D>
__global__ void __launch_bounds__(kFW * 32, 1)
    attention_f16_kernel(const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos, const int32_t* row_seq,
                         PagedKv kv, int n_head, int n_kv_head, float scale, float* out) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  auto& S = *reinterpret_cast<F16AttnSmem<D>*>(smem_raw);
  constexpr int kVec = D / 32;                       // float4s of a key row per lane: 8 lanes a row
  constexpr uint32_t kBufBytes = kFK * (D + 8) * 2;  // one tile's keys (or values) in shared memory
  const int G = n_head / n_kv_head, HB = min(G, kFW), RW = kFW / HB, HG = (G + HB - 1) / HB;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
  const int kvh = int(blockIdx.y) / HG, head_in = int(blockIdx.y) % HG * HB + warp % HB;
  const int kvh_read = (TF_DCTL(202) && n_kv_head > 1) ? (kvh + 1) % n_kv_head : kvh;  // planted: wrong KV head
  const bool active = warp < RW * HB && head_in < G;
  const int head = kvh * G + head_in;
  const int rows_b = 16 * RW;
  const int64_t row0 = int64_t(blockIdx.x) * rows_b, wrow0 = row0 + 16 * (warp / HB);
  const int64_t width = int64_t(n_head) * D;
  bool waited = false;  // staged rows and positions precede the round, so the passes are found before waiting
  __shared__ BlockPasses bp;
  const int n_pass = find_passes<kFW>(bp, pos, row_seq, row0, rows_b, n_rows);
  for (int pass = 0; pass < n_pass; ++pass) {
    const int seq = bp.p_seq[pass], n_keys = bp.p_keys[pass];  // the pass's keys: the most any of its rows attends
    int lim[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = 16 * (warp / HB) + g + 8 * hr;
      lim[hr] = active && bp.r_seq[r] == seq ? bp.r_keys[r] : 0;
    }
    int wkeys = max(lim[0], lim[1]);  // the warp's last key: later tiles are masked for all its rows
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) wkeys = max(wkeys, __shfl_xor_sync(0xffffffffu, wkeys, off));
    if (!waited) grid_wait(), waited = true;  // Q and the keys are the previous kernels'
    uint32_t qa[D / 16][4];
    float qf[2];
    query_fragments<D>(q, q_stride, n_rows, wrow0, head, lim, __fmul_rn(scale, 1.44269504088896341f), TF_DCTL(207), qa,
                       qf);
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
    // One step of two tiles (buffers 2 sb, 2 sb + 1): their scores, the softmax step, then P V, each output's chain
    // in key order.
    auto step_pass = [&](int sb, int kt) {
      float s[2][4][4] = {};
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int k2 = 0; k2 < D / 32; ++k2)
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {  // keys 8 nt.., columns 32 k2 + 8 m for matrix m: two k-steps
            uint32_t b[4];
            ldsm_x4(b, kaddr + (2 * sb + u) * kBufBytes + (8 * nt * (D + 8) + 32 * k2) * 2);
            mma_m16n8k16_f16(s[u][nt], qa[2 * k2], b[0], b[1]);
            mma_m16n8k16_f16(s[u][nt], qa[2 * k2 + 1], b[2], b[3]);
            if (TF_DCTL(205))  // planted: the score chain kept in fp16
#pragma unroll
              for (int e = 0; e < 4; ++e) s[u][nt][e] = __half2float(__float2half_rn(s[u][nt][e]));
          }
      float alpha[2];
      pair_softmax(s, S.kf[2 * sb], kt, lim, qf, mrun, lrun, alpha);
      uint32_t pa[4][4];
#pragma unroll
      for (int u = 0; u < 2; ++u)  // planted 208: 2^-ev lost
        p_fragments(s[u], S.vf[2 * sb + u], TF_DCTL(208), *reinterpret_cast<uint32_t(*)[2][4]>(pa[2 * u]));
      const bool any_done = __any_sync(0xffffffffu, kt >= lim[0] || kt >= lim[1]);
      const uint64_t neg0 = any_done ? negative_zeros<D>(o, kt, lim) : 0;
      rescale<D>(o, alpha);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        if (TF_DCTL(204) && kk == 3) break;  // planted: a step's last 16 keys lost
#pragma unroll
        for (int n2 = 0; n2 < D / 16; ++n2) {  // keys 16 kk + 8 (m & 1).., columns 16 n2 + 8 (m >> 1)
          uint32_t b[4];
          ldsm_x4_trans(b, vaddr + (2 * sb + kk / 2) * kBufBytes + (16 * (kk % 2) * (D + 8) + 16 * n2) * 2);
          mma_m16n8k16_f16(o[2 * n2], pa[kk], b[0], b[1]);
          mma_m16n8k16_f16(o[2 * n2 + 1], pa[kk], b[2], b[3]);
        }
      }
      if (any_done) restore_negative_zeros<D>(o, neg0);
    };
    const int n_steps = (n_keys + 2 * kFK - 1) / (2 * kFK);
    float4 kr0[kVec], vr0[kVec], kr1[kVec], vr1[kVec];
    if (n_steps > 0) load(0, kr0, vr0), load(1, kr1, vr1);  // past the keys: zeros, masked
#pragma unroll 1
    for (int st = 0; st < n_steps; ++st) {
      convert(2 * (st & 1), kr0, vr0), convert(2 * (st & 1) + 1, kr1, vr1);
      if (st + 1 < n_steps) load(2 * st + 2, kr0, vr0), load(2 * st + 3, kr1, vr1);  // in flight during this step
      __syncthreads();  // the step is converted, and no warp still reads the buffers two steps back
      if (active && 2 * st * kFK < wkeys) step_pass(st & 1, 2 * st * kFK);
    }
    __syncthreads();                                                             // the next pass refills the buffers
    write_rows<D>(o, lrun, lim, wrow0, n_rows, width, head, TF_DCTL(206), out);  // planted 206: last row one late
  }
  if (!waited) grid_wait();
}

}  // namespace

bool attention_prompt_supports(int64_t head_dim, int64_t n_head, int64_t n_kv_head) {
  return (head_dim == 64 || head_dim == 128) && n_kv_head > 0 && n_head % n_kv_head == 0;
}

namespace {
std::atomic<int64_t> g_key_launches{0};  // for tests: that a round took the converted keys

template <int D>
void launch_f16(dim3 grid, const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos, const int32_t* row_seq,
                const PagedKv& kv, int n_head, int n_kv_head, float scale, float* out) {
  constexpr size_t bytes = sizeof(F16AttnSmem<D>);
  static const cudaError_t ready =
      cudaFuncSetAttribute(attention_f16_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  cuda_check(ready, "prompt attention: shared memory");
  launch_k(attention_f16_kernel<D>, grid, kFW * 32, bytes, q, q_stride, n_rows, pos, row_seq, kv, n_head, n_kv_head,
           scale, out);
}
}  // namespace

int64_t attention_prompt_key_launches() { return g_key_launches.load(); }

size_t attention_prompt_keys_bytes(int64_t slots, int64_t n_kv_head, int64_t head_dim) {
  return size_t(n_kv_head * slots) * (4 * size_t(head_dim) + 8);  // fp16 keys and values, two f32 factors
}

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
  if (conv && (keys->n_seqs <= 0 || keys->max_tiles <= 0 || keys->slots % (2 * kFK) != 0 || !keys->slot || !keys->keys))
    throw std::logic_error(
        "attention: converted prompt keys need sequences, tiles and a whole number of tile pairs' slots");
  if (n_rows == 0) return;
  upload_control();
  if (conv && attention_wg_prompt(q, q_stride, n_rows, pos, row_seq, kv, int(n_head), int(n_kv_head), int(head_dim),
                                  scale, out, *keys)) {
    g_key_launches.fetch_add(1);
  } else {
    const int64_t G = n_head / n_kv_head, HB = std::min<int64_t>(G, kFW), RW = kFW / HB, HG = (G + HB - 1) / HB;
    const dim3 grid(unsigned((n_rows + 16 * RW - 1) / (16 * RW)), unsigned(n_kv_head * HG));
    (head_dim == 64 ? launch_f16<64> : launch_f16<128>)(grid, q, q_stride, n_rows, pos, row_seq, kv, int(n_head),
                                                        int(n_kv_head), scale, out);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA prompt attention: ") + cudaGetErrorString(e));
}

}  // namespace tf::cuda
