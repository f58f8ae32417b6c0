// Tensor-core products: activations split into bf16 hi + lo fragments, the mma kernels, the slice reduction, and
// the device scratch they share.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_mma.h"
#include "backend/cuda/mma_kernels.cuh"
#include "backend/cuda/mma_split.cuh"
#include "backend/cuda/slice_sum.cuh"
#include "base/env_switch.h"

namespace tf::cuda {

bool mma_kernels_a(const MmaArgs& a);
bool mma_kernels_b(const MmaArgs& a);
bool mma_kernels_group(const MmaGroup& g, GgmlType a, GgmlType b);

namespace {

constexpr auto& check = cuda_check;

// A thread per (row, 32-column group): the group's sum in column order and its hi/lo fragments for both steps.
__global__ void mma_split_x_kernel(const float* __restrict__ x, int64_t n_in, int64_t n_rows, uint4* __restrict__ xs,
                                   float* __restrict__ xsum, int ctl) {
  grid_wait();
  const int64_t groups = n_in / 32, i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_rows * groups) return;
  const int64_t row = i / groups, gi = i % groups;
  const float4* src = reinterpret_cast<const float4*>(x + row * n_in + gi * 32);
  float v[32];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float4 f = __ldg(src + k);
    v[4 * k] = f.x, v[4 * k + 1] = f.y, v[4 * k + 2] = f.z, v[4 * k + 3] = f.w;
  }
#pragma unroll
  for (int k = 0; k < 32; ++k)
    if (TF_MCTL(101) && !isfinite(v[k])) v[k] = 0.0f;  // planted: a non-finite activation read as 0
  split_group(v, row, gi, n_in, xs, xsum);
}

// x's rows split into xs and xsum by mma_split_x_kernel: the one launch of it, for products and groups alike.
void launch_split_x(const float* x, int64_t n_in, int64_t n_rows, uint4* xs, float* xsum, int ctl) {
  const int64_t tasks = n_rows * (n_in / 32);
  launch_k(mma_split_x_kernel, unsigned((tasks + 127) / 128), 128, 0, x, n_in, n_rows, xs, xsum, ctl);
}

// The slices' partials added in slice order, then the residual: the full kernel's exact sequence.
__global__ void mma_reduce_kernel(const float* __restrict__ partial, int slices, int64_t n, float* y,
                                  const float* residual) {
  grid_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float sum = slice_sum(partial, slices, n, i);
  y[i] = residual ? __fadd_rn(residual[i], sum) : sum;
}

void* g_scratch = nullptr;
size_t g_scratch_bytes = 0;
uint64_t g_epoch = 0;       // see mma_scratch_epoch
uint64_t g_generation = 0;  // bumped whenever the scratch moves, so graphs that captured it can be dropped

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// TF_MMA_SPLIT=1 keeps few-row products on the split kernels (benchmarks compare both; the bits are the same).
bool split_forced() {
  static const bool forced = env_switch("TF_MMA_SPLIT", 2, "1 keeps few-row products on the split kernels") == 1;
  return forced;
}

// TF_MMA_GROUP=0 runs one-row Q, K and V as three launches, 2 also does their RoPE and KV store in that launch
// (slower than rope_store beside it); the default, 1, is the one launch alone. All three give the same bits.
std::atomic<int> g_group{-1};  // -1: not read yet
int group_mode() {
  int m = g_group.load();
  if (m < 0) {
    m = env_switch("TF_MMA_GROUP", 3,
                   "0 runs one-row Q, K and V as separate launches, 2 also does their RoPE in that launch");
    m = m < 0 ? 1 : m;
    int unread = -1;
    if (!g_group.compare_exchange_strong(unread, m)) m = unread;  // mma_set_group came first
  }
  return m;
}

// TF_MMA_PREWAIT=0 makes few-row products wait on the kernel before them before their first weight load.
bool prewait_on() {
  static const bool on =
      env_switch("TF_MMA_PREWAIT", 2, "0 waits on the previous kernel before a product's first weight load") != 0;
  return on;
}

std::atomic<int> g_wgmma{-1};  // 1: many rows on warpgroup mma where the device runs it; 0 never; -1 not read yet

int wgmma_mode() {
  int m = g_wgmma.load();
  if (m < 0) {
    m = env_switch("TF_MMA_WGMMA", 2, "0 keeps many-row products off warpgroup mma") == 0 ? 0 : 1;
    int unread = -1;
    if (!g_wgmma.compare_exchange_strong(unread, m)) m = unread;  // mma_set_wgmma came first
  }
  return m;
}
std::atomic<int64_t> g_wgmma_launches{0};

}  // namespace

void mma_set_wgmma(int mode) { g_wgmma.store(mode); }
bool mma_prewait() { return prewait_on(); }
void mma_set_group(int mode) { g_group.store(mode); }
int mma_group_mode() { return group_mode(); }
int mma_wgmma_mode() { return wgmma_mode(); }
void mma_read_switches() {
  split_forced(), group_mode(), prewait_on(), wgmma_mode(), f16_enabled(), f16_image_mode(), f16_image_width_mode();
}
int64_t mma_wgmma_launches() { return g_wgmma_launches.load(); }
void mma_note_wgmma_launch() { g_wgmma_launches.fetch_add(1); }
bool mma_wgmma_device() {
  const LaunchDevice& dev = launch_device();
  return dev.major == 9 && dev.minor == 0;  // the sm_90a code runs on compute capability 9.0 only
}

namespace {

// Whether this product runs on warpgroup mma: asked once per call, for both the scratch and the dispatch.
bool wgmma_wanted(int64_t n_rows) {
  const int mode = wgmma_mode();
  return n_rows > kMmaSplitRows && mode != 0 && mma_wgmma_device();
}

size_t scratch_bytes(const DeviceMatrix& w, int64_t n_rows, bool wg) {
  const size_t xs = align256(size_t(n_rows * w.n_in) * 4), xsum = align256(size_t(n_rows * (w.n_in / 32)) * 4);
  const size_t part = n_rows <= kMmaSplitRows ? align256(size_t(w.slices * n_rows * w.n_out) * 4) : 0;
  const size_t stage = wg ? align256(mma_wg_stage_bytes(w.n_in, n_rows, w.slices)) : 0;
  return xs + xsum + part + stage;
}

}  // namespace

size_t mma_scratch_bytes(const DeviceMatrix& w, int64_t n_rows) {
  return std::max(scratch_bytes(w, n_rows, wgmma_wanted(n_rows)), f16_scratch_bytes(w, n_rows));
}

void mma_reserve(size_t bytes) {
  if (bytes <= g_scratch_bytes) return;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(launch_stream(), &cs), "capture query");
  if (cs != cudaStreamCaptureStatusNone)
    throw std::runtime_error("CUDA products: scratch too small inside a graph capture (reserve it first)");
  check(cudaStreamSynchronize(launch_stream()), "synchronize");
  void* p = nullptr;  // the new buffer first, so a failed allocation keeps the old one
  check(cudaMalloc(&p, bytes), "cudaMalloc (product scratch)");
  if (g_scratch) cudaFree(g_scratch);
  g_scratch = p, g_scratch_bytes = bytes;
  g_generation += 1;
  g_epoch += 1;
}

uint64_t mma_scratch_generation() { return g_generation; }

int64_t mma_split_rows() { return kMmaSplitRows; }

int64_t mma_partial_floats(const DeviceMatrix& w, int64_t n_rows) {
  return n_rows <= kMmaSplitRows ? int64_t(w.slices) * n_rows * w.n_out : 0;
}

namespace {
// What mma_stage left in the scratch: products with pre.staged must match it, or they would read another x's image.
struct Staged {
  int64_t n_in = -1, n_rows = -1;
  int slices = -1;
  uint64_t generation = 0;
  const void* xs = nullptr;
};
Staged g_staged;

// Where x's warpgroup-mma image lives in the scratch: after xs and xsum, the same place for every product of n_in.
void wg_image(MmaArgs& a, int64_t n_in, int64_t n_rows) {
  auto* base = static_cast<uint8_t*>(g_scratch);
  a.xw = base + align256(size_t(n_rows * n_in) * 4) + align256(size_t(n_rows * (n_in / 32)) * 4);
  a.xsw = reinterpret_cast<float*>(a.xw + wg_xw_bytes(n_in, n_rows));
}
}  // namespace

bool mma_stage(const DeviceMatrix& w, int64_t n_rows, const SplitX& pre, int ctl) {
  g_staged = {};
  g_epoch += 1;
  if (!pre.xs || n_rows <= 0 || n_rows > (int64_t(1) << 30) || !wgmma_wanted(n_rows)) return false;
  mma_reserve(scratch_bytes(w, n_rows, true));
  MmaArgs a{w, static_cast<const uint4*>(pre.xs), pre.xsum, int(n_rows), nullptr, nullptr, nullptr, ctl};
  wg_image(a, w.n_in, n_rows);
  launch_wg_stage(a);
  g_staged = {w.n_in, n_rows, w.slices, g_generation, pre.xs};
  return true;
}

uint8_t* mma_scratch_own(size_t bytes) {
  g_staged = {};
  g_epoch += 1;
  mma_reserve(bytes);
  return static_cast<uint8_t*>(g_scratch);
}

uint64_t mma_scratch_epoch() { return g_epoch; }
uint8_t* mma_scratch_base() { return static_cast<uint8_t*>(g_scratch); }

void mma_gemv(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual, int ctl,
              const SplitX& pre, Partials* defer, float* buf) {
  if (n_rows > (int64_t(1) << 30)) throw std::runtime_error("CUDA products: too many rows");
  if (n_rows <= 0) return;  // the kernels clamp reads to the last row, so they need one
  const bool wg = wgmma_wanted(n_rows);
  if (pre.staged) {  // only reads the scratch: no split, no stage, no partials (many rows), no new allocation
    const Staged& s = g_staged;
    if (!wg || pre.xs != s.xs || w.n_in != s.n_in || n_rows != s.n_rows || w.slices != s.slices ||
        s.generation != g_generation || scratch_bytes(w, n_rows, true) > g_scratch_bytes)
      throw std::logic_error(
          "CUDA products: a staged product must follow gemv_stage of its activations, with only "
          "staged products between");
  } else {
    g_staged = {};  // this call may overwrite the image
    g_epoch += 1;
  }
  mma_reserve(scratch_bytes(w, n_rows, wg));
  auto* base = static_cast<uint8_t*>(g_scratch);
  auto* xs = reinterpret_cast<uint4*>(base);
  auto* xsum = reinterpret_cast<float*>(base + align256(size_t(n_rows * w.n_in) * 4));
  auto* part =
      reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(xsum) + align256(size_t(n_rows * (w.n_in / 32)) * 4));
  if (pre.xs) {
    xs = static_cast<uint4*>(pre.xs), xsum = pre.xsum;
  } else {
    launch_split_x(x, w.n_in, n_rows, xs, xsum, ctl);
  }
  // Few rows: with 128-512 output tiles a block per tile adds the slices itself (enough blocks to fill the device,
  // no second kernel); otherwise the slices run in separate blocks, several tiles a warp, and a second kernel adds
  // them. Both give the same bits.
  const int64_t nt = (n_rows + 7) / 8, tiles = (w.n_out + 15) / 16;
  const bool few = n_rows <= kMmaSplitRows;
  const bool block = few && tiles >= 128 && tiles <= 512 && !split_forced();
  const bool split = few && !block;
  if (split && defer && buf) part = buf;
  MmaArgs a{w, xs, xsum, int(n_rows), y, residual, split ? part : nullptr, ctl};
  a.prewait = few && prewait_on();
  if (block) a.round = int(std::min<int64_t>(w.slices, 64 / nt));  // at most 32 KB of partials per block
  if (wg) {  // after xs and xsum (no partials with many rows); the stage kernel fills it, or mma_stage did
    wg_image(a, w.n_in, n_rows);
    a.staged = pre.staged;
  }
  if (!mma_kernels_a(a) && !mma_kernels_b(a)) throw std::runtime_error("CUDA products: no tensor-core kernel");
  if (split && defer) {
    *defer = {part, w.slices};
  } else if (split) {
    const int64_t n = n_rows * w.n_out;
    // Small blocks spread a decode row's few thousand outputs over more multiprocessors.
    launch_k(mma_reduce_kernel, unsigned((n + 63) / 64), 64, 0, part, w.slices, n, y, residual);
  }
}

bool mma_group(const DeviceMatrix* const* ws, float* const* ys, int count, const float* x, int64_t n_rows, int ctl,
               const SplitX& pre, const RopeKv& rope) {
  if (n_rows != 1 || count < 2 || count > kMmaGroupMax || pre.staged || group_mode() == 0) return false;
  if (rope.on && group_mode() == 1) return false;
  GgmlType other = ws[0]->type;
  int64_t blocks = 0;
  MmaGroup g{};
  g.count = count;
  g.rope = rope;
  // Costliest tiles first, so a second wave holds cheap ones; RoPE in the launch needs Q, K, V in place.
  int order[kMmaGroupMax];
  for (int j = 0; j < count; ++j) order[j] = j;
  if (!rope.on)
    std::stable_sort(order, order + count, [&](int a, int b) {
      return device_matrix_bytes(ws[a]->type, ws[a]->n_in, 16) > device_matrix_bytes(ws[b]->type, ws[b]->n_in, 16);
    });
  for (int i = 0; i < count; ++i) {
    const DeviceMatrix& w = *ws[i];
    if (!w.mma || w.n_in != ws[0]->n_in || w.slices != ws[0]->slices) return false;
    if (w.type != ws[0]->type) {
      if (other != ws[0]->type && w.type != other) return false;  // a third format
      other = w.type;
    }
  }
  for (int j = 0; j < count; ++j) {
    blocks += (ws[order[j]]->n_out + 15) / 16;
    g.end[j] = blocks;
  }
  if (blocks > 65535) return false;
  const uint4* xs = static_cast<const uint4*>(pre.xs);
  const float* xsum = pre.xsum;
  if (!xs) {  // split here, as mma_gemv would: the scratch holds x's fragments and column sums
    g_staged = {};
    g_epoch += 1;
    const int64_t n_in = ws[0]->n_in;
    mma_reserve(align256(size_t(n_in) * 4) + align256(size_t(n_in / 32) * 4));
    auto* base = static_cast<uint8_t*>(g_scratch);
    auto* sx = reinterpret_cast<uint4*>(base);
    auto* ss = reinterpret_cast<float*>(base + align256(size_t(n_in) * 4));
    launch_split_x(x, n_in, 1, sx, ss, ctl);
    xs = sx, xsum = ss;
  }
  for (int j = 0; j < count; ++j) {
    const int i = order[j];
    g.a[j] = MmaArgs{*ws[i], xs, xsum, 1, ys[i], nullptr, nullptr, ctl};
    g.a[j].round = int(std::min<int64_t>(ws[i]->slices, 64));  // as mma_gemv gives one row's block kernel
    g.a[j].prewait = prewait_on();
  }
  return mma_kernels_group(g, ws[0]->type, other);
}

}  // namespace tf::cuda
