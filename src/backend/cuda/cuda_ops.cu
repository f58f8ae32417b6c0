#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_ctl.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_stream.cuh"
#include "backend/cuda/mma_split.cuh"
#include "backend/cuda/paged_kv.cuh"
#include "backend/cuda/rms_scale.cuh"
#include "backend/cuda/rope_ops.cuh"
#include "backend/cuda/slice_sum.cuh"
#include "backend/cuda/swiglu_of.cuh"

namespace tf::cuda {
namespace {

void check_launch(const char* op) { cuda_check(cudaGetLastError(), op); }

constexpr int kNormThreads = kRmsThreads;
constexpr int64_t kNormRowsOneBlock = 64;  // a wave of one-block rows: no need to spread a row over blocks
constexpr int kRopeTasks = 4;              // rope_store's tasks a thread where rows are many

__global__ void rmsnorm_kernel(const float* x, const float* w, int64_t n, float eps, float* y, uint4* xs, float* xsum,
                               int64_t groups_per_block) {
  const int64_t g0 = int64_t(blockIdx.x) * groups_per_block, g1 = min(g0 + groups_per_block, n / 32);
  const int64_t i0 = (g0 + threadIdx.x / 32) * 32 + (threadIdx.x & 31);
  const float w0 = xs && i0 < g1 * 32 ? w[i0] : 0.0f;  // the weights are not the previous kernel's: read before waiting
  grid_wait();
  const int64_t row = blockIdx.y;  // blockIdx.x: which groups of the split output (every block sums the whole row)
  const float* xr = x + row * n;
  float* yr = y + row * n;
  const float scale = rms_row_scale(xr, n, eps, TF_DCTL(111));  // planted 111: the sum of squares lost
  if (xs) {  // a warp per 32-column group, a lane per column: the same values, also split for the products
    for (int64_t gi = g0 + threadIdx.x / 32; gi < g1; gi += kNormThreads / 32) {
      const int64_t i = gi * 32 + (threadIdx.x & 31);
      const float xv = xr[i], y1 = __fmul_rn(__fmul_rn(xv, scale), i == i0 ? w0 : w[i]);
      yr[i] = y1;
      split_group_warp(TF_DCTL(113) ? xv : y1, row, gi, n, xs, xsum);  // planted: split of the unnormalised row
    }
  } else {
    for (int64_t i = threadIdx.x; i < n; i += kNormThreads) yr[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
  }
  if (TF_DCTL(112) && threadIdx.x == 0 && blockIdx.x == 0) yr[n] = 0.0f;  // planted: write past the end
}

__device__ __forceinline__ float swiglu_of(float gi, float up) {
  return swiglu_value(gi, up, TF_DCTL(121));  // planted 121: sigmoid sign slip
}
__device__ __forceinline__ int64_t up_index(int64_t i, int64_t n) {
  return (TF_DCTL(122) && i + 1 < n) ? i + 1 : i;  // planted: reads the neighbour's up value
}

__global__ void swiglu_kernel(const float* g, const float* u, float* out, int64_t n, int64_t in_stride) {
  grid_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t r = blockIdx.y;
  g += r * in_stride, u += r * in_stride, out += r * n;
  out[i] = swiglu_of(g[i], u[up_index(i, n)]);
}

// gate|up rows of 2n or their partials: a warp per (row, 32-column group), also split for the down product.
__global__ void swiglu_split_kernel(const float* gu, int slices, float* out, int64_t n, int64_t n_rows, uint4* xs,
                                    float* xsum) {
  grid_wait();
  const int64_t wid = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (wid >= n_rows * (n / 32)) return;  // whole warps only: the split's shuffles need every lane
  const int64_t r = wid / (n / 32), gi = wid % (n / 32), i = gi * 32 + (threadIdx.x & 31);
  auto at = [&](int64_t j) {  // planted 124: the partials added in reverse order
    return slices ? slice_sum(gu, slices, n_rows * 2 * n, r * 2 * n + j, TF_DCTL(124)) : gu[r * 2 * n + j];
  };
  const float g = at(i), y = swiglu_of(g, at(n + up_index(i, n)));
  out[r * n + i] = y;
  split_group_warp(TF_DCTL(123) ? g : y, r, gi, n, xs, xsum);  // planted: the split taken from the gate
}

// Per row: Q rotated in place, K rotated and V into its page slot; P tasks a thread, all read before any write.
template <int P>
__global__ void rope_store_kernel(float* q, int64_t q_stride, int n_head, KvSource k, KvSource v, int64_t n_rows,
                                  int head_dim, int half, const float* cos, const float* sin, bool neox,
                                  const int32_t* pos, const int32_t* row_seq, const int32_t* page_table,
                                  int64_t max_pages, float* base, int64_t page_floats, int64_t layer_offset,
                                  int64_t page_size, int kv_row) {
  const int64_t r = blockIdx.y;
  const int n_kv_head = kv_row / head_dim, tail = head_dim - 2 * half, nq = n_head * half, nk = n_kv_head * half;
  const int nt = nk + n_kv_head * tail, t0 = int(blockIdx.x * blockDim.x + threadIdx.x),
            S = int(gridDim.x * blockDim.x);
  // Task kinds: 0 a Q pair, 1 a K pair, 2 a K element past the rotated ones, 3 a V element, 4 none.
  int kind[P], h[P], i[P];
  float c[P], sn[P];
  bool kv_task = false;
#pragma unroll
  for (int e = 0; e < P; ++e) {
    const int t = t0 + e * S;
    kind[e] = t < nq ? 0 : t < nq + nk ? 1 : t < nq + nt ? 2 : t < nq + nt + kv_row ? 3 : 4;
    const int tr = kind[e] == 0 ? t : t - nq;  // the rotated pairs' index (0, 1), else the K|V element's (2, 3)
    h[e] = kind[e] < 2 ? tr / half : 0, i[e] = kind[e] < 2 ? tr - h[e] * half : tr - (kind[e] == 3 ? nt : nk);
    // The round's staged angles, positions and pages precede its first kernel: read them before waiting.
    c[e] = kind[e] < 2 ? cos[r * half + i[e]] : 0.0f, sn[e] = kind[e] < 2 ? sin[r * half + i[e]] : 0.0f;
    kv_task |= kind[e] >= 1 && kind[e] <= 3;
  }
  float* kp = kv_task
                  ? kv_slot(pos, row_seq, r, page_table, max_pages, base, page_floats, layer_offset, page_size, kv_row)
                  : nullptr;
  float* qr = q + r * q_stride;
  grid_wait();
  auto in = [&](const KvSource& s, int j) {  // planted 174: the partials added in reverse order
    return s.slices ? slice_sum(s.p, s.slices, n_rows * kv_row, r * kv_row + j, TF_DCTL(174)) : s.p[r * s.stride + j];
  };
  int a[P], b[P];
  float x0[P], x1[P];
#pragma unroll
  for (int e = 0; e < P; ++e) {  // every value read first: no write of this thread can hold a read back
    a[e] = b[e] = 0, x0[e] = x1[e] = 0.0f;
    if (kind[e] < 2) {
      rope_pair(i[e], half, neox, a[e], b[e]);
      a[e] += h[e] * head_dim, b[e] += h[e] * head_dim;
      x0[e] = kind[e] == 0 ? qr[a[e]] : in(k, a[e]), x1[e] = kind[e] == 0 ? qr[b[e]] : in(k, b[e]);
    } else if (kind[e] == 2) {
      const int th = i[e] / tail;
      a[e] = th * head_dim + 2 * half + (i[e] - th * tail);
      x0[e] = in(k, a[e]);
    } else if (kind[e] == 3) {
      a[e] = int(page_size) * kv_row + i[e];
      x0[e] = TF_DCTL(172) ? in(k, i[e]) : in(v, i[e]);  // planted: K stored as V
    }
  }
#pragma unroll
  for (int e = 0; e < P; ++e) {
    if (kind[e] < 2) {
      const float2 y = rope_rotate(x0[e], x1[e], c[e], sn[e]);
      float* dst = kind[e] == 0 ? qr : kp;
      dst[a[e]] = y.x, dst[b[e]] = y.y;
    } else if (kind[e] < 4) {
      kp[a[e]] = x0[e];
    }
  }
}

constexpr int kRopeRowThreads = 256;  // the row kernel's threads; each takes kRopeRowTasks float4 tasks a pass
constexpr int kRopeRowTasks = 2;

// rope_store's float4 tasks of one row: Q's, K's, then V's (NORM: a float4 of two pairs; NEOX: a float4 of a head's
// first half and its partner float4 half a head on). Full rotation, whole heads of HD, nothing strided by less than 4.
template <int HD>
struct RopeRow {
  static_assert(HD == 64 || HD == 128, "the row form takes heads of 64 or 128");
  int n_q, n_k, n_v;  // tasks of each kind
  bool neox;
  __device__ RopeRow(int n_head, int n_kv_head, bool nx) : neox(nx) {
    const int per = nx ? HD / 8 : HD / 4;
    n_q = n_head * per, n_k = n_kv_head * per, n_v = n_kv_head * HD / 4;
  }
  // Element offsets of task t's two float4 (b < 0: one float4) within its kind's row, and its first angle.
  __device__ void at(int t, int& a, int& b, int& ang) const {
    constexpr int kSh = HD == 64 ? 3 : 4;  // log2 of HD / 8
    const int sh = neox ? kSh : kSh + 1, h = t >> sh, c = t & ((1 << sh) - 1);
    a = h * HD + 4 * c, b = neox ? a + HD / 2 : -1, ang = neox ? 4 * c : 2 * c;
  }
};

// Prompt rows of rope_store (rope_store_kernel's float steps, so its bits): a block per row, float4 loads and stores,
// every task of a pass read before any is written.
template <int HD>
__global__ void __launch_bounds__(kRopeRowThreads, 4)
    rope_store_rows_kernel(float* q, int64_t q_stride, int n_head, KvSource k, KvSource v, int n_kv_head,
                           const float* cos, const float* sin, bool neox, const int32_t* pos, const int32_t* row_seq,
                           const int32_t* page_table, int64_t max_pages, float* base, int64_t page_floats,
                           int64_t layer_offset, int64_t page_size) {
  constexpr int kHalf = HD / 2;
  const int64_t r = blockIdx.x;
  const int kv_row = n_kv_head * HD;
  const RopeRow<HD> rr(n_head, n_kv_head, neox != TF_DCTL(131));  // planted: pairs taken with the other pairing
  float* kp = kv_slot(pos, row_seq, r, page_table, max_pages, base, page_floats, layer_offset, page_size, kv_row);
  const float* cr = cos + r * kHalf;
  const float* sr = sin + r * kHalf;
  float* qr = q + r * q_stride;
  const float* kr = k.p + r * k.stride;
  const float* vr = TF_DCTL(172) ? kr : v.p + r * v.stride;  // planted: K stored as V
  grid_wait();
  const int total = rr.n_q + rr.n_k + rr.n_v;
  for (int t0 = 0; t0 < total; t0 += kRopeRowThreads * kRopeRowTasks) {
    float4 x0[kRopeRowTasks], x1[kRopeRowTasks], c[kRopeRowTasks], sn[kRopeRowTasks];
    int kind[kRopeRowTasks], a[kRopeRowTasks], b[kRopeRowTasks];
#pragma unroll
    for (int e = 0; e < kRopeRowTasks; ++e) {  // kind 0 Q, 1 K, 2 V, 3 none
      int t = t0 + e * kRopeRowThreads + int(threadIdx.x), ang = 0;
      kind[e] = t < rr.n_q ? 0 : t < rr.n_q + rr.n_k ? 1 : t < total ? 2 : 3;
      t -= kind[e] == 0 ? 0 : kind[e] == 1 ? rr.n_q : rr.n_q + rr.n_k;
      a[e] = 4 * t, b[e] = -1;
      if (kind[e] < 2) rr.at(t, a[e], b[e], ang);
      const float* src = kind[e] == 0 ? qr : kind[e] == 1 ? kr : vr;
      x0[e] = x1[e] = c[e] = sn[e] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (kind[e] == 3) continue;
      x0[e] = *reinterpret_cast<const float4*>(src + a[e]);
      if (b[e] >= 0) {
        x1[e] = *reinterpret_cast<const float4*>(src + b[e]);
        c[e] = *reinterpret_cast<const float4*>(cr + ang), sn[e] = *reinterpret_cast<const float4*>(sr + ang);
      } else if (kind[e] < 2) {
        const float2 c2 = *reinterpret_cast<const float2*>(cr + ang), s2 = *reinterpret_cast<const float2*>(sr + ang);
        c[e] = make_float4(c2.x, c2.y, 0.0f, 0.0f), sn[e] = make_float4(s2.x, s2.y, 0.0f, 0.0f);
      }
    }
#pragma unroll
    for (int e = 0; e < kRopeRowTasks; ++e) {
      if (kind[e] == 3) continue;
      float* dst = kind[e] == 0 ? qr : kind[e] == 1 ? kp : kp + page_size * kv_row;
      float4 y0 = x0[e], y1 = x1[e];
      if (kind[e] < 2 && b[e] >= 0) {  // NEOX: element i of the first half with element i of the second
        float2 p;
        p = rope_rotate(x0[e].x, x1[e].x, c[e].x, sn[e].x), y0.x = p.x, y1.x = p.y;
        p = rope_rotate(x0[e].y, x1[e].y, c[e].y, sn[e].y), y0.y = p.x, y1.y = p.y;
        p = rope_rotate(x0[e].z, x1[e].z, c[e].z, sn[e].z), y0.z = p.x, y1.z = p.y;
        p = rope_rotate(x0[e].w, x1[e].w, c[e].w, sn[e].w), y0.w = p.x, y1.w = p.y;
        *reinterpret_cast<float4*>(dst + b[e]) = y1;
      } else if (kind[e] < 2) {  // NORM: adjacent pairs
        float2 p;
        p = rope_rotate(x0[e].x, x0[e].y, c[e].x, sn[e].x), y0.x = p.x, y0.y = p.y;
        p = rope_rotate(x0[e].z, x0[e].w, c[e].y, sn[e].y), y0.z = p.x, y0.w = p.y;
      }
      *reinterpret_cast<float4*>(dst + a[e]) = y0;
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
std::atomic<int64_t> g_rope_rows{0};

__global__ void add_bias_kernel(float* x, const float* b, int64_t n_rows, int64_t n) {
  grid_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_rows * n) return;
  const int64_t col = TF_DCTL(191) ? (i + 1) % n : i % n;  // planted: the neighbouring column's bias
  x[i] = __fadd_rn(x[i], b[col]);
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  grid_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = TF_DCTL(192) ? x[i] : __fadd_rn(x[i], y[i]);  // planted: the residual term lost
}

__global__ void gather_rows_kernel(const float* src, const int32_t* idx, int64_t n, float* dst) {
  grid_wait();
  const int64_t r = blockIdx.y;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[r * n + i] = src[int64_t(TF_DCTL(181) ? idx[r] + 1 : idx[r]) * n + i];  // planted: the next row
}

__global__ void copy_after_kernel(const uint4* src, uint4* dst, int64_t n, int64_t ns) {
  grid_wait();
  if (threadIdx.x == 0) {
    uint64_t t0 = 0, t = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
      __nanosleep(1000);
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (int64_t(t - t0) < ns);
  }
  __syncthreads();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

unsigned grid(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

}  // namespace

void add_bias(float* x, const float* b, int64_t n_rows, int64_t n) {
  if (n_rows * n == 0) return;
  upload_control();
  launch_k(add_bias_kernel, grid(n_rows * n, 256), 256, 0, x, b, n_rows, n);
  check_launch("add_bias");
}

void add_inplace(float* x, const float* y, int64_t n) {
  if (n == 0) return;
  upload_control();
  launch_k(add_kernel, grid(n, 256), 256, 0, x, y, n);
  check_launch("add");
}

void gather_rows(const float* src, const int32_t* idx, int64_t n_rows, int64_t n, float* dst) {
  if (n_rows == 0) return;
  upload_control();
  launch_k(gather_rows_kernel, dim3(grid(n, 256), unsigned(n_rows)), 256, 0, src, idx, n, dst);
  check_launch("gather_rows");
}

void copy_after(void* dst, const void* src, int64_t bytes, int64_t ns) {
  if (bytes % 16 != 0) throw std::runtime_error("copy_after: whole 16-byte words only");
  const int64_t n = bytes / 16;
  if (n == 0) return;
  launch_k(copy_after_kernel, std::min(grid(n, 256), 64u), 256, 0, static_cast<const uint4*>(src),
           static_cast<uint4*>(dst), n, ns);
  check_launch("copy_after");
}

void rmsnorm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y, void* xs, float* xsum) {
  if (xs && n % 64 != 0) throw std::runtime_error("rmsnorm: a split output needs rows of whole 64-column steps");
  if (xs && x == y) throw std::runtime_error("rmsnorm: a split output needs separate input and output rows");
  upload_control();
  // Split output: few rows spread a row's groups over blocks (each sums the whole row the same way), many take one.
  const int64_t groups = n / 32, per = n_rows >= kNormRowsOneBlock && groups > 0 ? groups : kNormThreads / 32;
  const unsigned chunks = xs ? unsigned((groups + per - 1) / per) : 1u;
  launch_k(rmsnorm_kernel, dim3(chunks, unsigned(n_rows)), kNormThreads, 0, x, w, n, eps, y, static_cast<uint4*>(xs),
           xsum, per);
  check_launch("rmsnorm");
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  upload_control();
  launch_k(swiglu_kernel, unsigned((n + 255) / 256), 256, 0, gate, up, out, n, 0);
  check_launch("swiglu");
}

void swiglu_pairs(const float* gu, int64_t n_rows, int64_t n, float* out, void* xs, float* xsum,
                  const Partials& parts) {
  if (n_rows == 0) return;
  upload_control();
  if (xs) {
    if (n % 64 != 0) throw std::runtime_error("swiglu: a split output needs rows of whole 64-column steps");
    const int64_t tasks = n_rows * (n / 32);
    launch_k(swiglu_split_kernel, unsigned((tasks + 3) / 4), 128, 0, parts.p ? parts.p : gu, parts.p ? parts.slices : 0,
             out, n, n_rows, static_cast<uint4*>(xs), xsum);
    check_launch("swiglu_pairs");
    return;
  }
  if (parts.p) throw std::runtime_error("swiglu: product partials need the split output");
  launch_k(swiglu_kernel, dim3(unsigned((n + 255) / 256), unsigned(n_rows)), 256, 0, gu, gu + n, out, n, 2 * n);
  check_launch("swiglu_pairs");
}

void rope_store(float* q, int64_t q_stride, int64_t n_head, const KvSource& k, const KvSource& v, int64_t n_rows,
                int64_t head_dim, int64_t n_rot, const float* cos, const float* sin, bool neox, const int32_t* pos,
                const int32_t* row_seq, const int32_t* page_table, int64_t max_pages, float* base, int64_t page_floats,
                int64_t layer_offset, int64_t page_size, int64_t kv_row) {
  if (n_rows == 0) return;
  if (n_rot % 2 != 0 || n_rot > head_dim || kv_row % head_dim != 0)
    throw std::runtime_error("rope_store: n_rot must be even and at most the head size, K|V rows whole heads");
  upload_control();
  const int64_t half = n_rot / 2, n_kv_head = kv_row / head_dim;
  const int64_t tasks = n_head * half + n_kv_head * (head_dim - half) + kv_row;
  if (tasks + n_head * head_dim + page_size * kv_row >= (int64_t(1) << 31))
    throw std::runtime_error("rope_store: rows past 2^31 floats");
  // Many rows: kRopeTasks a thread, so a row's blocks are few and their loads overlap; few rows: one, for more blocks.
  const bool many = n_rows >= 16;
  // Many rows of whole rotated heads of 64 or 128, all float4-aligned: a block a row and float4 tasks, the same bits.
  const bool rows_form = many && n_rot == head_dim && (head_dim == 64 || head_dim == 128) && k.slices == 0 &&
                         v.slices == 0 && aligned16(q) && aligned16(k.p) && aligned16(v.p) && aligned16(base) &&
                         aligned16(cos) && aligned16(sin) && q_stride % 4 == 0 && k.stride % 4 == 0 &&
                         v.stride % 4 == 0 && page_floats % 4 == 0 && layer_offset % 4 == 0;
  if (rows_form) {
    launch_k(head_dim == 64 ? rope_store_rows_kernel<64> : rope_store_rows_kernel<128>, unsigned(n_rows),
             kRopeRowThreads, 0, q, q_stride, int(n_head), k, v, int(n_kv_head), cos, sin, neox, pos, row_seq,
             page_table, max_pages, base, page_floats, layer_offset, page_size);
    check_launch("rope_store");
    g_rope_rows.fetch_add(1);
    return;
  }
  launch_k(many ? rope_store_kernel<kRopeTasks> : rope_store_kernel<1>,
           dim3(grid(tasks, many ? kRopeTasks * 128 : 128), unsigned(n_rows)), 128, 0, q, q_stride, int(n_head), k, v,
           n_rows, int(head_dim), int(half), cos, sin, neox, pos, row_seq, page_table, max_pages, base, page_floats,
           layer_offset, page_size, int(kv_row));
  check_launch("rope_store");
}

int64_t rope_store_row_launches() { return g_rope_rows.load(); }

}  // namespace tf::cuda
