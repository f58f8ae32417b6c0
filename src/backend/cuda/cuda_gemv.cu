#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/ctl.h"
#include "backend/cuda/cuda_gemv.h"
#include "backend/cuda/cuda_stream.cuh"

namespace tf::cuda {
namespace {

void check(cudaError_t e, const char* op) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA ") + op + ": " + cudaGetErrorString(e));
}

constexpr int kRowsPerPass = 8;

// Planted controls exist only in the test build (TF_CTL=1); the production kernel has no such branch.
#if defined(TF_CTL) && TF_CTL
#define TF_DCTL(n) (ctl == (n))
#else
#define TF_DCTL(n) false
#endif

// Exact small integer to float without the quarter-rate converter: 2^23 + q read as a float, minus 2^23 + bias.
__device__ __forceinline__ float small_int(uint32_t q, float bias) {
  return __fsub_rn(__uint_as_float(0x4B000000u | q), 8388608.0f + bias);
}
__device__ __forceinline__ float f16(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// One lane task: a 16-byte chunk of payload (two or three for k-quants) and the elements it decodes, in gguf-py's
// operation order (products and sums rounded separately, never fused). kElems elements; element e of task t sits at
// input column t_base + x_off(e), in runs of four.
template <int kType>
struct Fmt;

template <>
struct Fmt<int(GgmlType::F32)> {
  static constexpr int kElems = 4;
  static __device__ int64_t base(int64_t t) { return 4 * t; }
  static __device__ int x_off(int e) { return e; }
  static __device__ void decode(const uint8_t* q, const uint8_t*, int64_t t, float* v) {
    const float4 a = reinterpret_cast<const float4*>(q)[t];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  }
};

template <int kT>
struct Fmt16 {  // F16 and BF16: eight elements per chunk
  static constexpr int kElems = 8;
  static __device__ int64_t base(int64_t t) { return 8 * t; }
  static __device__ int x_off(int e) { return e; }
  static __device__ void decode(const uint8_t* q, const uint8_t*, int64_t t, float* v) {
    const uint4 u = reinterpret_cast<const uint4*>(q)[t];
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (kT == int(GgmlType::F16)) {
        v[2 * i] = f16(uint16_t(w[i] & 0xFFFF)), v[2 * i + 1] = f16(uint16_t(w[i] >> 16));
      } else {
        v[2 * i] = __uint_as_float(w[i] << 16), v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
      }
    }
  }
};
template <>
struct Fmt<int(GgmlType::F16)> : Fmt16<int(GgmlType::F16)> {};
template <>
struct Fmt<int(GgmlType::BF16)> : Fmt16<int(GgmlType::BF16)> {};

template <>
struct Fmt<int(GgmlType::Q8_0)> {  // payload: 32 int8 per block; scales: one f16 per block; a task is half a block
  static constexpr int kElems = 16;
  static __device__ int64_t base(int64_t t) { return 16 * t; }
  static __device__ int x_off(int e) { return e; }
  static __device__ void decode(const uint8_t* q, const uint8_t* s, int64_t t, float* v) {
    const float d = f16(reinterpret_cast<const uint16_t*>(s)[t >> 1]);
    const uint4 u = reinterpret_cast<const uint4*>(q)[t];
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = __fmul_rn(small_int(((w[i >> 2] >> (8 * (i & 3))) & 0xFF) ^ 0x80, 128.0f), d);
  }
};

template <int kT>
struct Fmt4 {  // Q4_0 and Q4_1: 16 payload bytes per block (low nibbles: elements 0-15, high: 16-31)
  static constexpr int kElems = 32;
  static __device__ int64_t base(int64_t t) { return 32 * t; }
  static __device__ int x_off(int e) { return e; }
  static __device__ void decode(const uint8_t* q, const uint8_t* s, int64_t t, float* v) {
    const uint4 u = reinterpret_cast<const uint4*>(q)[t];
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    float d, m = 0.0f;
    if constexpr (kT == int(GgmlType::Q4_1)) {
      const uint32_t dm = reinterpret_cast<const uint32_t*>(s)[t];
      d = f16(uint16_t(dm & 0xFFFF)), m = f16(uint16_t(dm >> 16));
    } else {
      d = f16(reinterpret_cast<const uint16_t*>(s)[t]);
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t byte = (w[i >> 2] >> (8 * (i & 3))) & 0xFF;
      if constexpr (kT == int(GgmlType::Q4_1)) {
        v[i] = __fadd_rn(__fmul_rn(small_int(byte & 15, 0.0f), d), m);
        v[16 + i] = __fadd_rn(__fmul_rn(small_int(byte >> 4, 0.0f), d), m);
      } else {
        v[i] = __fmul_rn(small_int(byte & 15, 8.0f), d);
        v[16 + i] = __fmul_rn(small_int(byte >> 4, 8.0f), d);
      }
    }
  }
};
template <>
struct Fmt<int(GgmlType::Q4_0)> : Fmt4<int(GgmlType::Q4_0)> {};
template <>
struct Fmt<int(GgmlType::Q4_1)> : Fmt4<int(GgmlType::Q4_1)> {};

template <>
struct Fmt<int(GgmlType::Q4_K)> {  // 144-byte super-blocks as stored; a task is sub-block pair j: 64 elements
  static constexpr int kElems = 64;
  static __device__ int64_t base(int64_t t) { return 64 * t; }
  static __device__ int x_off(int e) { return e; }
  static __device__ void decode(const uint8_t* q, const uint8_t*, int64_t t, float* v) {
    const uint8_t* blk = q + (t >> 2) * 144;
    const int j = int(t & 3);
    const uint4 h = *reinterpret_cast<const uint4*>(blk);
    const float d = f16(uint16_t(h.x & 0xFFFF)), dmin = f16(uint16_t(h.x >> 16));
    const uint32_t scw[3] = {h.y, h.z, h.w};
    auto sb = [&](int k) { return int((scw[k >> 2] >> (8 * (k & 3))) & 0xFF); };
    float dd[2], mm[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int s = 2 * j + half;
      int sc, mn;
      if (s < 4) {
        sc = sb(s) & 63, mn = sb(s + 4) & 63;
      } else {
        sc = (sb(s + 4) & 15) | ((sb(s - 4) >> 6) << 4);
        mn = (sb(s + 4) >> 4) | ((sb(s) >> 6) << 4);
      }
      dd[half] = __fmul_rn(d, float(sc)), mm[half] = __fmul_rn(dmin, float(mn));
    }
    const uint4 a = reinterpret_cast<const uint4*>(blk + 16 + 32 * j)[0];
    const uint4 b = reinterpret_cast<const uint4*>(blk + 16 + 32 * j)[1];
    const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const uint32_t byte = (w[i >> 2] >> (8 * (i & 3))) & 0xFF;
      v[i] = __fsub_rn(__fmul_rn(dd[0], small_int(byte & 15, 0.0f)), mm[0]);
      v[32 + i] = __fsub_rn(__fmul_rn(dd[1], small_int(byte >> 4, 0.0f)), mm[1]);
    }
  }
};

template <>
struct Fmt<int(GgmlType::Q6_K)> {  // payload: ql, qh, scales (208 bytes); scales: f16 d per super-block
  static constexpr int kElems = 64;
  // Task t = (super-block, half n, l-range h): elements 128n + 32g + 16h + i for groups g < 4, i < 16.
  static __device__ int64_t base(int64_t t) { return (t >> 2) * 256 + ((t >> 1) & 1) * 128 + (t & 1) * 16; }
  static __device__ int x_off(int e) { return 32 * (e >> 4) + (e & 15); }
  static __device__ void decode(const uint8_t* q, const uint8_t* s, int64_t t, float* v) {
    const uint8_t* blk = q + (t >> 2) * 208;
    const int n = int((t >> 1) & 1), h = int(t & 1);
    const float d = f16(reinterpret_cast<const uint16_t*>(s)[t >> 2]);
    const uint4 la = *reinterpret_cast<const uint4*>(blk + 64 * n + 16 * h);
    const uint4 lb = *reinterpret_cast<const uint4*>(blk + 64 * n + 32 + 16 * h);
    const uint4 qh = *reinterpret_cast<const uint4*>(blk + 128 + 32 * n + 16 * h);
    const uint2 scp = *reinterpret_cast<const uint2*>(blk + 192 + 8 * n);
    const uint32_t A[4] = {la.x, la.y, la.z, la.w}, B[4] = {lb.x, lb.y, lb.z, lb.w}, H[4] = {qh.x, qh.y, qh.z, qh.w};
    float ds[4];
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      const int idx = 2 * g + h;
      const int8_t sc = int8_t(((idx < 4 ? scp.x : scp.y) >> (8 * (idx & 3))) & 0xFF);
      ds[g] = __fmul_rn(d, float(sc));
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t sh = 8 * (i & 3);
      const uint32_t a = (A[i >> 2] >> sh) & 0xFF, b = (B[i >> 2] >> sh) & 0xFF, hh = (H[i >> 2] >> sh) & 0xFF;
      v[i] = __fmul_rn(ds[0], small_int((a & 15) | ((hh & 3) << 4), 32.0f));
      v[16 + i] = __fmul_rn(ds[1], small_int((b & 15) | (((hh >> 2) & 3) << 4), 32.0f));
      v[32 + i] = __fmul_rn(ds[2], small_int((a >> 4) | (((hh >> 4) & 3) << 4), 32.0f));
      v[48 + i] = __fmul_rn(ds[3], small_int((b >> 4) | (((hh >> 6) & 3) << 4), 32.0f));
    }
  }
};

// One warp per output column; lane l takes tasks l, l+32, ... in order (one running sum per row and lane), then a
// fixed shuffle tree. Nothing in a row's arithmetic depends on how many rows share the launch.
template <int kType>
__global__ void gemv_kernel(DeviceMatrix w, const float* __restrict__ x, int n_rows, float* __restrict__ y, int ctl) {
  using F = Fmt<kType>;
  const int64_t o = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (o >= w.n_out) return;
  const uint8_t* q = w.q + o * w.q_row;
  const uint8_t* s = w.s + o * w.s_row;
  const int64_t n_in = w.n_in, n_tasks = n_in / F::kElems;
  for (int r0 = 0; r0 < n_rows; r0 += kRowsPerPass) {
    const int nr = min(kRowsPerPass, n_rows - r0);
    float acc[kRowsPerPass];
#pragma unroll
    for (int r = 0; r < kRowsPerPass; ++r) acc[r] = 0.0f;
    for (int64_t t = lane; t < n_tasks; t += 32) {
      float v[F::kElems];
      F::decode(q, s, t, v);
      const int64_t base = F::base(t);
#pragma unroll
      for (int r = 0; r < kRowsPerPass; ++r) {
        if (r >= nr) break;
        int rx = r0 + r;
        if (TF_DCTL(102) && r > 0 && t < 8) rx -= 1;  // planted: a row reads its neighbour's activations
        const float* xr = x + int64_t(rx) * n_in + base;
#pragma unroll
        for (int g = 0; g < F::kElems / 4; ++g) {
          const float4 xv4 = __ldg(reinterpret_cast<const float4*>(xr + F::x_off(4 * g)));
          float xv[4] = {xv4.x, xv4.y, xv4.z, xv4.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            if (TF_DCTL(101) && !isfinite(xv[i])) xv[i] = 0.0f;  // planted: non-finite activation read as 0
            acc[r] = fmaf(v[4 * g + i], xv[i], acc[r]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerPass; ++r) {
      if (r >= nr) break;
      float t = acc[r];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) t += __shfl_xor_sync(0xffffffffu, t, off);
      if (lane == 0) y[int64_t(r0 + r) * w.n_out + o] = t;
    }
  }
}

// Token rows decoded exactly as the GEMV reads them: one thread per (row, task).
template <int kType>
__global__ void embedding_kernel(DeviceMatrix w, const int32_t* __restrict__ ids, float* __restrict__ out, int ctl) {
  using F = Fmt<kType>;
  const int64_t r = blockIdx.y;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= w.n_in / F::kElems) return;
  const int64_t id = TF_DCTL(151) ? ids[r] + 1 : ids[r];  // planted: the next token's row
  float v[F::kElems];
  F::decode(w.q + id * w.q_row, w.s + id * w.s_row, t, v);
  if (TF_DCTL(152)) v[0] = 0.0f;  // planted: a lost element
  float* o = out + r * w.n_in + F::base(t);
#pragma unroll
  for (int e = 0; e < F::kElems; ++e) o[F::x_off(e)] = v[e];
}

int active_control() {
#if defined(TF_CTL) && TF_CTL
  return g_active_control;
#else
  return 0;
#endif
}

// Payload and scale bytes per block in the device layout.
struct Split {
  int64_t elems, q_bytes, s_bytes, s_offset;  // s_offset: where the scale sits in the GGUF block (-1: none)
};
Split split_of(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return {32, 128, 0, -1};
    case GgmlType::F16: case GgmlType::BF16: return {32, 64, 0, -1};
    case GgmlType::Q8_0: return {32, 32, 2, 0};
    case GgmlType::Q4_0: return {32, 16, 2, 0};
    case GgmlType::Q4_1: return {32, 16, 4, 0};
    case GgmlType::Q4_K: return {256, 144, 0, -1};
    case GgmlType::Q6_K: return {256, 208, 2, 208};
    default: throw std::runtime_error("CUDA weights: unsupported format");
  }
}

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

#define TF_FOR_EACH_FORMAT(X) X(F32) X(F16) X(BF16) X(Q4_0) X(Q4_1) X(Q8_0) X(Q4_K) X(Q6_K)

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

bool gemv_supports(GgmlType t) {
  switch (t) {
#define X(T) case GgmlType::T:
    TF_FOR_EACH_FORMAT(X)
#undef X
    return true;
    default: return false;
  }
}

int64_t gemv_block_elems(GgmlType t) { return split_of(t).elems; }

size_t device_matrix_bytes(GgmlType type, int64_t n_in, int64_t n_out) {
  const Split sp = split_of(type);
  const int64_t nb = n_in / sp.elems;
  return align256(size_t(nb * sp.q_bytes * n_out)) + align256(size_t(nb * sp.s_bytes * n_out));
}

DeviceMatrix upload_matrix(GgmlType type, const void* host, int64_t n_in, int64_t n_out, void* dst) {
  const Split sp = split_of(type);
  if (n_in % sp.elems != 0) throw std::runtime_error("CUDA weights: rows are not whole blocks");
  const int64_t nb = n_in / sp.elems;
  auto* d = static_cast<uint8_t*>(dst);
  DeviceMatrix m{type, d, d + align256(size_t(nb * sp.q_bytes * n_out)), n_in, n_out, nb * sp.q_bytes, nb * sp.s_bytes};
  const int64_t src_block = sp.q_bytes + sp.s_bytes;
  if (sp.s_bytes == 0) {
    check(cudaMemcpy(d, host, size_t(nb * sp.q_bytes * n_out), cudaMemcpyHostToDevice), "weight upload");
    return m;
  }
  // Blocks split into payload and scale streams, a bounded slice of rows at a time.
  const auto* src = static_cast<const uint8_t*>(host);
  const int64_t rows_per = std::max<int64_t>(1, (int64_t(64) << 20) / (nb * src_block));
  std::vector<uint8_t> qb, sb;
  for (int64_t r0 = 0; r0 < n_out; r0 += rows_per) {
    const int64_t nr = std::min(rows_per, n_out - r0);
    qb.resize(size_t(nr * nb * sp.q_bytes));
    sb.resize(size_t(nr * nb * sp.s_bytes));
    for (int64_t b = 0; b < nr * nb; ++b) {
      const uint8_t* blk = src + (r0 * nb + b) * src_block;
      const uint8_t* scale = blk + sp.s_offset;
      const uint8_t* payload = sp.s_offset == 0 ? blk + sp.s_bytes : blk;
      std::memcpy(qb.data() + b * sp.q_bytes, payload, size_t(sp.q_bytes));
      std::memcpy(sb.data() + b * sp.s_bytes, scale, size_t(sp.s_bytes));
    }
    check(cudaMemcpy(d + r0 * m.q_row, qb.data(), qb.size(), cudaMemcpyHostToDevice), "weight upload");
    check(cudaMemcpy(const_cast<uint8_t*>(m.s) + r0 * m.s_row, sb.data(), sb.size(), cudaMemcpyHostToDevice),
          "scale upload");
  }
  return m;
}

void gemv(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y) {
  if (!gemv_supports(w.type) || w.n_in % gemv_block_elems(w.type) != 0)
    throw std::runtime_error("gemv: unsupported format or row length");
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(w.q) % 16 != 0)
    throw std::runtime_error("gemv: misaligned weights or activations");
  if (n_rows == 0) return;
  const int threads = 256;
  const unsigned blocks = unsigned((w.n_out * 32 + threads - 1) / threads);
  const int ctl = active_control();
  switch (w.type) {
#define X(T) \
  case GgmlType::T: gemv_kernel<int(GgmlType::T)><<<blocks, threads, 0, launch_stream()>>>(w, x, int(n_rows), y, ctl); break;
    TF_FOR_EACH_FORMAT(X)
#undef X
    default: break;
  }
  check(cudaGetLastError(), "gemv launch");
}

void embedding(const DeviceMatrix& w, const int32_t* ids, int64_t n_rows, float* out) {
  if (!gemv_supports(w.type) || w.n_in % gemv_block_elems(w.type) != 0) throw std::runtime_error("embedding: unsupported format");
  if (n_rows == 0) return;
  const int ctl = active_control();
  switch (w.type) {
#define X(T)                                                                                                  \
  case GgmlType::T: {                                                                                         \
    const unsigned gx = unsigned((w.n_in / Fmt<int(GgmlType::T)>::kElems + 127) / 128);                      \
    embedding_kernel<int(GgmlType::T)><<<dim3(gx, unsigned(n_rows)), 128, 0, launch_stream()>>>(w, ids, out, ctl); \
    break;                                                                                                    \
  }
    TF_FOR_EACH_FORMAT(X)
#undef X
    default: break;
  }
  check(cudaGetLastError(), "embedding launch");
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}
void device_free(void* p) { check(cudaFree(p), "cudaFree"); }
void copy_to_device(void* dst, const void* src, size_t n) { check(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "copy to device"); }
void copy_to_host(void* dst, const void* src, size_t n) { check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "copy to host"); }
void synchronize() { check(cudaDeviceSynchronize(), "synchronize"); }

cudaStream_t launch_stream() {
  static cudaStream_t s = [] {
    cudaStream_t t = nullptr;
    check(cudaStreamCreate(&t), "stream create");
    return t;
  }();
  return s;
}

}  // namespace tf::cuda
