#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/ctl.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_gemv.h"
#include "backend/cuda/cuda_mma.h"
#include "backend/cuda/cuda_stream.cuh"
#include "backend/cuda/mma_pack.h"

namespace tf::cuda {

bool weight_kernels_float(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual,
                          const int32_t* ids, float* emb_out, int ctl);
bool weight_kernels_quant(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual,
                          const int32_t* ids, float* emb_out, int ctl);

namespace {

constexpr auto& check = cuda_check;

int active_control() {
#if defined(TF_CTL) && TF_CTL
  return g_active_control;
#else
  return 0;
#endif
}

// A GGUF block as the device layout splits it: 16-byte payload chunks and scale bytes.
struct Split {
  int64_t elems, chunks, s_bytes, block_bytes, payload_offset, s_offset;
};
Split split_of(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return {32, 8, 0, 128, 0, 0};
    case GgmlType::F16:
    case GgmlType::BF16:
      return {32, 4, 0, 64, 0, 0};
    case GgmlType::Q8_0:
      return {32, 2, 2, 34, 2, 0};
    case GgmlType::Q4_0:
      return {32, 1, 2, 18, 2, 0};
    case GgmlType::Q4_1:
      return {32, 1, 4, 20, 4, 0};
    case GgmlType::Q4_K:
      return {256, 9, 0, 144, 0, 0};
    case GgmlType::Q6_K:
      return {256, 13, 2, 210, 0, 208};
    default:
      throw std::runtime_error("CUDA weights: unsupported format");
  }
}

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// Asks L2 for `len` bytes at each of `ranges` starts `stride` apart (16-byte aligned) in 4 KB bulk requests: a hint,
// so no value changes and nothing waits for it to land.
__global__ void l2_prefetch_kernel(const uint8_t* p, int64_t ranges, int64_t stride, int64_t len) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int64_t kChunk = 4096;
  const int64_t per = (len + kChunk - 1) / kChunk, total = ranges * per;
  const int64_t threads = int64_t(gridDim.x) * blockDim.x, i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t k = i; k < total; k += threads) {
    const int64_t off = (k % per) * kChunk;
    const uint32_t n = uint32_t(len - off < kChunk ? len - off : kChunk);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + (k / per) * stride + off), "r"(n) : "memory");
  }
#endif
}

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
    default:
      return false;
  }
}

int64_t gemv_block_elems(GgmlType t) { return split_of(t).elems; }
int64_t unit_elems(GgmlType t) { return split_of(t).elems; }

size_t device_matrix_bytes(GgmlType type, int64_t n_in, int64_t n_out, bool table) {
  if (!table && mma_layout(type, n_in)) return mma_matrix_bytes(type, n_in, n_out);
  const Split sp = split_of(type);
  const int64_t units = n_in / sp.elems, tiles = (n_out + 31) / 32;
  return align256(size_t(tiles * units * sp.chunks * 512)) + align256(size_t(tiles * units * 32 * sp.s_bytes));
}

DeviceMatrix upload_matrix(GgmlType type, const void* host, int64_t n_in, int64_t n_out, void* dst, bool table) {
  if (!table && mma_layout(type, n_in)) return mma_upload(type, host, n_in, n_out, dst, copy_to_device);
  const Split sp = split_of(type);
  if (n_in % sp.elems != 0) throw std::runtime_error("CUDA weights: rows are not whole blocks");
  const int64_t units = n_in / sp.elems, tiles = (n_out + 31) / 32, row_bytes = units * sp.block_bytes;
  auto* d = static_cast<uint8_t*>(dst);
  DeviceMatrix m{type, d, d + align256(size_t(tiles * units * sp.chunks * 512)), nullptr, n_in, n_out, units, 1};
  // Enough warps per tile to fill the device on narrow matrices; a function of the shape alone.
  m.slices = int(std::min<int64_t>(tiles >= 512 ? 8 : 16, units));
  const auto* src = static_cast<const uint8_t*>(host);
  const int64_t tile_q = units * sp.chunks * 512, tile_s = units * 32 * sp.s_bytes;
  const int64_t per = std::max<int64_t>(1, (int64_t(64) << 20) / tile_q);
  std::vector<uint8_t> qb, sb;
  for (int64_t t0 = 0; t0 < tiles; t0 += per) {
    const int64_t nt = std::min(per, tiles - t0);
    qb.assign(size_t(nt * tile_q), 0);
    sb.assign(size_t(nt * tile_s), 0);
    for (int64_t t = 0; t < nt; ++t)
      for (int64_t l = 0; l < 32; ++l) {
        const int64_t o = (t0 + t) * 32 + l;
        if (o >= n_out) break;
        for (int64_t u = 0; u < units; ++u) {
          const uint8_t* blk = src + o * row_bytes + u * sp.block_bytes;
          for (int64_t c = 0; c < sp.chunks; ++c)
            std::memcpy(qb.data() + t * tile_q + ((u * sp.chunks + c) * 32 + l) * 16, blk + sp.payload_offset + 16 * c,
                        16);
          if (sp.s_bytes)
            std::memcpy(sb.data() + t * tile_s + (u * 32 + l) * sp.s_bytes, blk + sp.s_offset, size_t(sp.s_bytes));
        }
      }
    check(cudaMemcpy(d + t0 * tile_q, qb.data(), qb.size(), cudaMemcpyHostToDevice), "weight upload");
    if (sp.s_bytes)
      check(cudaMemcpy(const_cast<uint8_t*>(m.s) + t0 * tile_s, sb.data(), sb.size(), cudaMemcpyHostToDevice),
            "scale upload");
  }
  return m;
}

// What every product checks before it launches anything.
// A stacked matrix's weights are Q's alone (its n_out spans K and V): only its prompt product, from its image, reads
// it.
static void check_product(const DeviceMatrix& w, const float* x, bool stacked_ok = false) {
  if (w.f16_seg[0] != 0 && !stacked_ok)
    throw std::logic_error("gemv: a stacked prompt matrix is read by gemv_prompt from its image only");
  if (!gemv_supports(w.type) || w.n_in % gemv_block_elems(w.type) != 0)
    throw std::runtime_error("gemv: unsupported format or row length");
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(w.q) % 16 != 0 || w.slices < 1)
    throw std::runtime_error("gemv: misaligned weights or activations");
}

void gemv(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual, const SplitX& pre) {
  check_product(w, x);
  if (n_rows == 0) return;
  const int ctl = active_control();
  if (w.mma) {
    mma_gemv(w, x, n_rows, y, residual, ctl, pre);
    check(cudaGetLastError(), "gemv launch");
    return;
  }
  if (!weight_kernels_float(w, x, n_rows, y, residual, nullptr, nullptr, ctl))
    weight_kernels_quant(w, x, n_rows, y, residual, nullptr, nullptr, ctl);
  check(cudaGetLastError(), "gemv launch");
}

bool gemv_group(const DeviceMatrix* const* ws, float* const* ys, int count, const float* x, int64_t n_rows,
                const SplitX& pre, const RopeKv& rope) {
  for (int i = 0; i < count; ++i) check_product(*ws[i], x);
  if (rope.on && (count != 3 || rope.head_dim <= 0 || rope.half < 0 || 2 * rope.half > rope.head_dim ||
                  ws[0]->n_out % rope.head_dim != 0 || ws[1]->n_out != rope.kv_row || ws[2]->n_out != rope.kv_row ||
                  rope.kv_row % rope.head_dim != 0 || rope.head_dim % 2 != 0))
    throw std::runtime_error("gemv_group: RoPE needs Q, K and V of whole even heads, K and V one KV row each");
  if (!mma_group(ws, ys, count, x, n_rows, active_control(), pre, rope)) return false;
  check(cudaGetLastError(), "gemv_group launch");
  return true;
}

bool gemv_group_ropes() { return mma_group_mode() == 2; }

bool gemv_prompt_takes(const DeviceMatrix& w) { return f16_takes(w); }

void gemv_prompt(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual, bool staged) {
  check_product(w, x, true);
  f16_gemm(w, x, n_rows, y, residual, active_control(), staged);
  check(cudaGetLastError(), "gemv_prompt launch");
}

void gemv_prompt_stage(const DeviceMatrix& w, const float* x, int64_t n_rows) {
  check_product(w, x);
  f16_stage(w, x, n_rows, active_control());
  check(cudaGetLastError(), "gemv_prompt_stage launch");
}

void gemv_prompt_stage_swiglu(const DeviceMatrix& w, const float* gu, int64_t n_rows) {
  check_product(w, gu);
  f16_stage(w, gu, n_rows, active_control(), true);
  check(cudaGetLastError(), "gemv_prompt_stage_swiglu launch");
}

void gemv_prompt_stage_norm(const DeviceMatrix& w, const float* x, const float* norm_w, float eps, int64_t n_rows,
                            const float* as) {
  check_product(w, x);
  if (reinterpret_cast<uintptr_t>(norm_w) % 16 != 0) throw std::runtime_error("gemv: misaligned norm weights");
  f16_stage_norm(w, x, norm_w, eps, n_rows, as, active_control());
  check(cudaGetLastError(), "gemv_prompt_stage_norm launch");
}

int64_t prompt_fused_stages() { return f16_fused_stages(); }

size_t prompt_image_bytes(const DeviceMatrix& w) { return f16_image_size(w); }
size_t prompt_image_bytes_for(GgmlType type, int64_t n_in, int64_t n_out) {
  return f16_image_size_for(type, n_in, n_out);
}
int prompt_image_mode() { return f16_image_mode(); }
void set_prompt_image_mode(int mode) { f16_set_image_mode(mode); }
int prompt_image_width(int64_t n_out) { return f16_image_width(n_out); }
int set_prompt_image_width(int width) {
  const int before = f16_image_width_mode();
  f16_set_image_width(width);
  return before;
}

void prompt_image_build(DeviceMatrix& w, void* dst) {
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0) throw std::runtime_error("prompt_image_build: misaligned image");
  f16_image(w, dst, active_control());
  check(cudaGetLastError(), "prompt_image_build launch");
}

size_t prompt_image_stack_bytes(const std::vector<const DeviceMatrix*>& ms) {
  return f16_stack_size(ms.data(), int(ms.size()));
}
size_t prompt_image_stack_bytes_for(const std::vector<GgmlType>& types, int64_t n_in,
                                    const std::vector<int64_t>& n_out) {
  if (types.size() != n_out.size()) throw std::invalid_argument("prompt_image_stack_bytes_for: a type per matrix");
  return f16_stack_size_for(types.data(), n_out.data(), int(types.size()), n_in);
}
DeviceMatrix prompt_image_stack(const std::vector<const DeviceMatrix*>& ms, void* dst) {
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0) throw std::runtime_error("prompt_image_stack: misaligned image");
  DeviceMatrix s = f16_image_stack(ms.data(), int(ms.size()), dst, active_control());
  check(cudaGetLastError(), "prompt_image_stack launch");
  return s;
}

bool gemv_stage(const DeviceMatrix& w, int64_t n_rows, const SplitX& pre) {
  if (!w.mma || !pre.xs) return false;
  const bool staged = mma_stage(w, n_rows, pre, active_control());
  check(cudaGetLastError(), "gemv stage launch");
  return staged;
}

Partials gemv_partials(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const SplitX& pre, float* buf) {
  if (!w.mma || n_rows == 0) {
    gemv(w, x, n_rows, y, nullptr, pre);
    return {};
  }
  check_product(w, x);
  Partials out;
  mma_gemv(w, x, n_rows, y, nullptr, active_control(), pre, &out, buf);
  check(cudaGetLastError(), "gemv launch");
  return out;
}

int64_t prefetch_budget() {
  // The rest of L2 for what the products read and write besides weights.
  return launch_device().l2_bytes / 100 * 85;
}

int64_t prefetch_weights(const DeviceMatrix& w, double head, int64_t max_bytes) {
  if (w.f16_seg[0] != 0) throw std::logic_error("prefetch_weights: a stacked prompt matrix has no weights of its own");
  if (prefetch_mode() == 0 || !w.q || max_bytes <= 0) return 0;
  const int64_t all = int64_t(device_matrix_bytes(w.type, w.n_in, w.n_out));
  if (double(all) * head > double(max_bytes)) head = double(max_bytes) / double(all);
  const unsigned blocks = unsigned(launch_device().sm_count);
  auto go = [blocks](const uint8_t* p, int64_t ranges, int64_t stride, int64_t len) {
    if (len <= 0 || ranges <= 0) return;
    // The bulk requests go out through each SM's copy engine: one block an SM spreads them.
    l2_prefetch_kernel<<<blocks, 128, 0, side_stream()>>>(p, ranges, stride, len);
    check(cudaGetLastError(), "prefetch launch");
  };
  if (head >= 1.0) {
    go(w.q, 1, 0, all);
    return all;
  }
  if (!w.mma) return 0;  // the tiled layout keeps a tile's units apart: no cheap head to take
  // The first part of every 16-output tile's weights (and Q6_K high bits), where each product block starts reading.
  const int64_t tiles = (w.n_out + 15) / 16, tq = (w.h - w.q) / tiles / 16 * 16, th = (w.s - w.h) / tiles / 16 * 16;
  const int64_t lq = int64_t(double(tq) * head) / 16 * 16, lh = int64_t(double(th) * head) / 16 * 16;
  go(w.q, tiles, tq, lq);
  go(w.h, tiles, th, lh);
  return tiles * (lq + lh);
}

int64_t gemv_split_rows() { return mma_split_rows(); }

int64_t gemv_partial_floats(const DeviceMatrix& w, int64_t n_rows) { return w.mma ? mma_partial_floats(w, n_rows) : 0; }

size_t gemv_scratch_bytes(const DeviceMatrix& w, int64_t n_rows) { return w.mma ? mma_scratch_bytes(w, n_rows) : 0; }
void reserve_gemv_scratch(size_t bytes) { mma_reserve(bytes); }
uint64_t gemv_scratch_generation() { return mma_scratch_generation(); }

void embedding(const DeviceMatrix& w, const int32_t* ids, int64_t n_rows, float* out) {
  if (w.mma) throw std::runtime_error("embedding: the table was uploaded for products, not lookups");
  if (!gemv_supports(w.type) || w.n_in % gemv_block_elems(w.type) != 0)
    throw std::runtime_error("embedding: unsupported format");
  if (n_rows == 0) return;
  const int ctl = active_control();
  if (!weight_kernels_float(w, nullptr, n_rows, nullptr, nullptr, ids, out, ctl))
    weight_kernels_quant(w, nullptr, n_rows, nullptr, nullptr, ids, out, ctl);
  check(cudaGetLastError(), "embedding launch");
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}
void device_free(void* p) { check(cudaFree(p), "cudaFree"); }
void copy_to_device(void* dst, const void* src, size_t n) {
  check(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "copy to device");
}
void copy_to_host(void* dst, const void* src, size_t n) {
  check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "copy to host");
}
void synchronize() { check(cudaDeviceSynchronize(), "synchronize"); }

}  // namespace tf::cuda
