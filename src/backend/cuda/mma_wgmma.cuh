#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/wgmma_ops.cuh"

// Many rows on Hopper: the products' arithmetic (mma_kernels.cuh) with warpgroup mma. A warpgroup takes 64 outputs x
// 64 rows; each warp decodes its 16 outputs' A fragments as the mma.sync kernels do, and x's bf16 hi and lo parts
// come from shared memory. wgmma gives the bits of one mma.sync m16n8k16 per 8 columns on the same operands and
// accumulators (tools/gpu/probe_wgmma.cu), and the contract compares every row of a many-row call with the row alone.
namespace tf::cuda {

constexpr int kWgRows = 64;                                    // activation rows per block: the wgmma N
constexpr int kWgWarps = 8;                                    // two warpgroups: 128 outputs share the staged x
constexpr size_t kWgStepBytes = size_t(2) * 2 * kWgRows * 16;  // one step's hi and lo B: two 8-column chunks
constexpr size_t kWgXsumBytes = kWgRows * 8 * 4;               // a slice's group sums of the block's rows
constexpr size_t kWgBuf = 16 * kWgStepBytes + kWgXsumBytes;    // one slice: B, then the group sums
constexpr size_t kWgSmem = 2 * kWgBuf + 16;                    // two slices in flight, and their two barriers
static_assert(kWgSmem <= 227 * 1024, "an sm_90 block's shared window (227 KB) keeps descriptor addresses below 2^18");

// The grid of a product's wgmma kernel: 128-output column blocks x 64-row blocks (the launch and the scratch use it).
__host__ __device__ inline int64_t wg_row_blocks(int64_t n_rows) { return (n_rows + kWgRows - 1) / kWgRows; }
inline int64_t wg_col_blocks(int64_t n_out) { return ((n_out + 15) / 16 + kWgWarps - 1) / kWgWarps; }
inline size_t wg_xw_bytes(int64_t n_in, int64_t n_rows) {
  return size_t(wg_row_blocks(n_rows) * (n_in / 16)) * kWgStepBytes;
}

// x rearranged once per call into the blocks' shared-memory image, so a slice arrives by one bulk copy:
// xw [row block][step][hi, lo][8-column chunk][row][8 bf16], xsw [row block][slice][group][row] (zeros past the row).
template <int kUnused = 0>  // a template, so the three files that include this header share one definition
__global__ void mma_wg_stage_kernel(const uint4* __restrict__ xs, const float* __restrict__ xsum, int64_t n_in,
                                    int64_t n_rows, int slices, uint8_t* __restrict__ xw, float* __restrict__ xsw,
                                    int ctl) {
  grid_wait();
  const int64_t steps = n_in / 16, groups32 = n_in / 32, blocks = wg_row_blocks(n_rows);
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < blocks * kWgRows * steps) {
    const int64_t rb = i / (kWgRows * steps), s = (i / kWgRows) % steps;
    const int n = int(i % kWgRows);
    int64_t r = rb * kWgRows + n < n_rows ? rb * kWgRows + n : n_rows - 1;
    if (TF_MCTL(102) && r > 0 && s < 2) r -= 1;  // planted: a row reads its neighbour's activations
    const uint4* src = xs + (r * steps + s) * 4;
    const uint4 u0 = __ldg(src), u1 = __ldg(src + 1), u2 = __ldg(src + 2), u3 = __ldg(src + 3);
    uint8_t* dst = xw + (rb * steps + s) * kWgStepBytes + n * 16;
    *reinterpret_cast<uint4*>(dst) = make_uint4(u0.x, u1.x, u2.x, u3.x);                     // hi, k 0-7
    *reinterpret_cast<uint4*>(dst + kWgRows * 16) = make_uint4(u0.y, u1.y, u2.y, u3.y);      // hi, k 8-15
    *reinterpret_cast<uint4*>(dst + 2 * kWgRows * 16) = make_uint4(u0.z, u1.z, u2.z, u3.z);  // lo, k 0-7
    *reinterpret_cast<uint4*>(dst + 3 * kWgRows * 16) = make_uint4(u0.w, u1.w, u2.w, u3.w);  // lo, k 8-15
  }
  if (i < blocks * slices * kWgRows * 8) {
    const int64_t rb = i / (int64_t(slices) * kWgRows * 8), sl = (i / (kWgRows * 8)) % slices;
    const int j = int((i / kWgRows) % 8), n = int(i % kWgRows);
    const int64_t r = rb * kWgRows + n < n_rows ? rb * kWgRows + n : n_rows - 1;
    xsw[i] = sl * 8 + j < groups32 ? __ldg(xsum + r * groups32 + sl * 8 + j) : 0.0f;
  }
}

inline size_t mma_wg_stage_bytes(int64_t n_in, int64_t n_rows, int slices) {  // xw, then xsw
  return wg_xw_bytes(n_in, n_rows) + size_t(wg_row_blocks(n_rows) * slices) * kWgXsumBytes;
}

// A block of two warpgroups over 128 outputs x 64 rows: each slice of x's image (wgmma's no-swizzle K-major layout)
// and its group sums arrive by bulk copy into one of two buffers while warp w multiplies output tile w from the other.
template <int kType>
__global__ void __launch_bounds__(kWgWarps * 32) mma_wgmma_kernel(MmaArgs A) {
  grid_wait();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using F = MmaF<kType>;
  extern __shared__ __align__(128) uint8_t sm_b[];
  const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3, warp = tid >> 5;
  [[maybe_unused]] const int ctl = A.ctl;
  const DeviceMatrix& w = A.w;
  const int64_t last_tile = (w.n_out + 15) / 16 - 1, steps = w.n_in / 16;
  const int64_t tile = int64_t(blockIdx.x) * kWgWarps + warp, tm = tile < last_tile ? tile : last_tile;
  const int64_t row0 = int64_t(blockIdx.y) * kWgRows;
  const uint32_t sm_base = uint32_t(__cvta_generic_to_shared(sm_b)), bar0 = sm_base + uint32_t(2 * kWgBuf);
  const uint8_t* xw_blk = A.xw + int64_t(blockIdx.y) * steps * kWgStepBytes;
  const float* xsw_blk = A.xsw + int64_t(blockIdx.y) * w.slices * kWgRows * 8;
  auto units_of = [&](int sl) {
    const int64_t rem = w.units - int64_t(sl) * 4;
    return rem < 4 ? int(rem) : 4;
  };
  // Thread 0 starts slice sl's copies into buffer sl % 2; its barrier completes when all their bytes have landed.
  auto fetch = [&](int sl) {
    const uint32_t buf = sm_base + uint32_t((sl & 1) * kWgBuf), bar = bar0 + 8 * (sl & 1);
    const uint32_t b_bytes = uint32_t(units_of(sl) * 4 * kWgStepBytes);
    mbar_expect(bar, b_bytes + uint32_t(kWgXsumBytes));
    bulk_copy(buf, xw_blk + int64_t(sl) * 16 * kWgStepBytes, b_bytes, bar);
    bulk_copy(buf + uint32_t(16 * kWgStepBytes), xsw_blk + int64_t(sl) * kWgRows * 8, uint32_t(kWgXsumBytes), bar);
  };
  if (tid == 0) {
    mbar_init(bar0);
    mbar_init(bar0 + 8);
    mbar_init_fence();
    fetch(0);
    if (w.slices > 1) fetch(1);
  }
  __syncthreads();
  constexpr int kM = F::kMeta > 0 ? F::kMeta : 1;
  // A slice's scales and weights into registers (units past a short slice reread unit 0, never used).
  auto load_slice = [&](int sl, uint32_t(&meta)[2][kM], typename F::Raw(&raw)[4]) {
    const uint32_t* m = reinterpret_cast<const uint32_t*>(w.s) + ((tm * w.slices + sl) * 16 + g) * F::kMeta;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
#pragma unroll
      for (int k = 0; k < F::kMeta; ++k) meta[hr][k] = __ldg(m + 8 * hr * F::kMeta + k);
    const int64_t at = (tm * w.units + int64_t(sl) * 4) * 32 + lane;
    const int nk = units_of(sl);
#pragma unroll
    for (int kb = 0; kb < 4; ++kb) raw[kb] = F::load(w.q, w.h, at + (kb < nk ? kb : 0) * 32);
  };
  // Loads a slice ahead where the registers allow it (BF16's 64 bytes a unit do not).
  constexpr bool kAhead = sizeof(typename F::Raw) <= 32;
  uint32_t meta_n[2][kM];
  typename F::Raw raw_n[4];
  if constexpr (kAhead) load_slice(0, meta_n, raw_n);
  float tot[32];
  for (int sl = 0; sl < w.slices; ++sl) {
    const int nk = units_of(sl);
    const uint32_t sm_addr = sm_base + uint32_t((sl & 1) * kWgBuf);
    const float* sm_xsum = reinterpret_cast<const float*>(sm_b + (sl & 1) * kWgBuf + 16 * kWgStepBytes);
    mbar_wait(bar0 + 8 * (sl & 1), uint32_t((sl >> 1) & 1));
    uint32_t meta[2][kM];
    typename F::Raw raw[4];
    if constexpr (kAhead) {  // this slice's weights came a slice ahead; the next slice's loads go out now
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
#pragma unroll
        for (int k = 0; k < kM; ++k) meta[hr][k] = meta_n[hr][k];
#pragma unroll
      for (int kb = 0; kb < 4; ++kb) raw[kb] = raw_n[kb];
      if (sl + 1 < w.slices) load_slice(sl + 1, meta_n, raw_n);
    } else {
      load_slice(sl, meta, raw);
    }
    float p[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) p[i] = 0.0f;
    // Groups in a two-deep pipeline: group q's wgmma run while group q - 1's scale steps run on the CUDA cores.
    const int ng = nk * 4 / F::kSpg;
    float c[2][32];
    uint32_t a[2][F::kSpg][4];
    // LBO: the next 8 columns (k) are 64 rows of 16 bytes on; SBO: the next 8 rows are 128 bytes on.
    const uint64_t lbo_sbo = (uint64_t((kWgRows * 16) >> 4) << 16) | (uint64_t(128 >> 4) << 32);
    // Step 0's descriptor's low word; an sm_90 block's shared addresses stay below 2^18, so offsets add without carry.
    const uint32_t desc0 = (sm_addr >> 4) | uint32_t(lbo_sbo);
    auto desc = [&](uint32_t off) { return (lbo_sbo >> 32 << 32) | (desc0 + (off >> 4)); };
    auto pin = [](float(&x)[32]) {  // orders reads of a finished group's accumulators after its wait
#pragma unroll
      for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(x[i])::"memory");
    };
    auto issue = [&](int q) {
      const int b = q & 1, st0 = q * F::kSpg;
#pragma unroll
      for (int s = 0; s < F::kSpg; ++s) F::frag(raw[st0 / 4], st0 % 4 + s, a[b][s]);
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
      for (int s = 0; s < F::kSpg; ++s) {
        const uint64_t hi = desc(uint32_t((st0 + s) * kWgStepBytes));
        if (s == 0)
          wgmma_m64n64<0>(c[b], a[b][s], hi);
        else
          wgmma_m64n64<1>(c[b], a[b][s], hi);
        if (!TF_MCTL(103))  // planted: the lo part dropped
          wgmma_m64n64<1>(c[b], a[b][s], desc(uint32_t((st0 + s) * kWgStepBytes + 2 * kWgRows * 16)));
      }
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    };
    // The group sums of this thread's two rows a group needs (adjacent in the image), read before its wgmma wait.
    float2 xs2[8];
    auto sums = [&](int q) {
#pragma unroll
      for (int jn = 0; jn < 8; ++jn)
        xs2[jn] = F::kMin ? *reinterpret_cast<const float2*>(sm_xsum + q * kWgRows + 8 * jn + 2 * t) : float2{};
    };
    auto finish = [&](int q) {  // group q's C into p: the scale (and min) steps of mma_slice
      const int b = q & 1;
      const float2 sc[2] = {F::group(meta[0], q), F::group(meta[1], q)};
#pragma unroll
      for (int jn = 0; jn < 8; ++jn) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = p[4 * jn + e];
          if constexpr (F::kScaled)
            v = fmaf(sc[e >> 1].x, c[b][4 * jn + e], v);
          else
            v = __fadd_rn(v, c[b][4 * jn + e]);
          if constexpr (F::kMin) v = fmaf(sc[e >> 1].y, (e & 1) ? xs2[jn].y : xs2[jn].x, v);
          p[4 * jn + e] = v;
        }
      }
    };
    if (nk == 4) {  // a whole slice: the static pipeline
#pragma unroll
      for (int q = 0; q < 16 / F::kSpg; ++q) {
        if (q > 0) sums(q - 1);
        issue(q);
        if (q > 0) {
          asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
          pin(c[(q - 1) & 1]);
          finish(q - 1);
        }
      }
      sums(16 / F::kSpg - 1);
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
      pin(c[(16 / F::kSpg - 1) & 1]);
      finish(16 / F::kSpg - 1);
    } else {  // the last slice of a row that is not a multiple of 256 columns: one group at a time
#pragma unroll
      for (int q = 0; q < 16 / F::kSpg; ++q) {
        if (q >= ng) break;
        sums(q);
        issue(q);
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        pin(c[q & 1]);
        finish(q);
      }
    }
#pragma unroll
    for (int i = 0; i < 32; ++i) tot[i] = sl == 0 ? p[i] : __fadd_rn(tot[i], p[i]);
    __syncthreads();  // every warp is done with this buffer (its wgmma waited, its sums read)
    if (tid == 0 && sl + 2 < w.slices) {
      async_proxy_fence();
      fetch(sl + 2);
    }
  }
#pragma unroll
  for (int jn = 0; jn < 8; ++jn)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t o = tile * 16 + g + 8 * (e >> 1), row = row0 + 8 * jn + 2 * t + (e & 1);
      if (o >= w.n_out || row >= A.n_rows) continue;
      const int64_t at_y = row * w.n_out + o;
      A.y[at_y] = A.residual ? __fadd_rn(A.residual[at_y], tot[4 * jn + e]) : tot[4 * jn + e];
    }
#else
  __trap();  // launched only where the sm_90a code runs (wgmma_takes)
#endif
}

// Whether this product runs here: mma_gemv chose it (and sized the scratch for it, A.xw) and the device runs the
// sm_90a build (the virtual-architecture PTX has no wgmma); the register kernel gives the same bits.
template <int kType>
bool wgmma_takes(const MmaArgs& A) {
  static const bool ready = [] {
    cudaFuncAttributes fa{};
    if (cudaFuncGetAttributes(&fa, mma_wgmma_kernel<kType>) != cudaSuccess || fa.binaryVersion != 90) return false;
    return cudaFuncSetAttribute(mma_wgmma_kernel<kType>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kWgSmem)) ==
           cudaSuccess;
  }();
  return ready && A.xw != nullptr;
}

// x rearranged into the blocks' shared-memory image (A.xw, A.xsw): one kernel, whatever the weights' format.
inline void launch_wg_stage(const MmaArgs& A) {
  const int64_t blocks = wg_row_blocks(A.n_rows), steps = A.w.n_in / 16;
  const int64_t work = std::max<int64_t>(blocks * kWgRows * steps, blocks * A.w.slices * kWgRows * 8);
  launch_k(mma_wg_stage_kernel<0>, unsigned((work + 255) / 256), 256, 0, A.xs, A.xsum, A.w.n_in, int64_t(A.n_rows),
           A.w.slices, A.xw, A.xsw, A.ctl);
}

template <int kType>
void launch_wgmma(const MmaArgs& A) {
  const int64_t blocks = wg_row_blocks(A.n_rows);
  if (!A.staged) launch_wg_stage(A);
  const dim3 grid(unsigned(wg_col_blocks(A.w.n_out)), unsigned(blocks));
  launch_k(mma_wgmma_kernel<kType>, grid, kWgWarps * 32, kWgSmem, A);
  mma_note_wgmma_launch();
}

}  // namespace tf::cuda
