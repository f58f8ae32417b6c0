// Prompt rows' products on Hopper (f16_prompt.cuh): which matrices take them, their scratch, and the launch.
#include <cuda_runtime.h>

#include <atomic>
#include <stdexcept>
#include <utility>

#include "backend/cuda/cuda_mma.h"
#include "backend/cuda/f16_image_gemm.cuh"
#include "backend/cuda/f16_prompt.cuh"
#include "backend/cuda/f16_wide_gemm.cuh"
#include "base/env_switch.h"

namespace tf::cuda {
namespace {

size_t align256(size_t n) { return (n + 255) / 256 * 256; }
int64_t padded_rows(int64_t n_rows) { return (n_rows + kF16RowPad - 1) / kF16RowPad * kF16RowPad; }

template <int kType, int kN>
bool kernel_ready() {
  static const bool ready = sm90a_ready(f16_wgmma_kernel<kType, kN>, f16_smem_bytes(kN));
  return ready;
}

bool image_gemm_ready() {
  static const bool ready = sm90a_ready(f16_image_gemm_kernel, kImgSmemBytes);
  return ready;
}

template <int kW>
bool wide_ready() {
  static const bool ready = sm90a_ready(f16_wide_gemm_kernel<kW>, wide_smem_bytes(kW));
  return ready;
}

template <int kType>
bool type_ready() {
  return kernel_ready<kType, 128>() && kernel_ready<kType, 256>();
}

// What f16_stage left in the scratch: staged products must match it, or they would read another x's image.
struct Staged {
  const float* x = nullptr;
  int64_t n_in = -1, n_rows = -1;
  uint64_t epoch = 0;
};
Staged g_staged;

int* exps_of(uint8_t* base, int64_t n_in, int64_t n_rows) {
  return reinterpret_cast<int*>(base + align256(size_t(padded_rows(n_rows) * n_in) * 2));
}

template <int kN, int kSrc = kStageX>
uint8_t* stage(const DeviceMatrix& w, const float* x, int64_t n_rows, int ctl, const float* norm_w = nullptr,
               float eps = 0.0f) {
  uint8_t* base = mma_scratch_own(f16_scratch_bytes(w, n_rows));
  // Rows of up to 4,096 columns keep their two chunks a thread in registers; longer ones keep eight (16,384 columns).
  const unsigned blocks = unsigned((n_rows + kN - 1) / kN * kN);
  int* xe = exps_of(base, w.n_in, n_rows);
  // Long SwiGLU rows: a cluster of four 256-thread blocks a row, so an SM runs four blocks in different phases.
  if constexpr (kSrc == kStageSwiglu) {
    if (w.n_in > 4096) {
      launch_kc(4, f16_stage_kernel<kN, 2, kSrc, 256, 4>, blocks * 4, 256, 0, x, w.n_in, n_rows, base, xe, ctl, norm_w,
                eps);
      return base;
    }
  }
  if (w.n_in <= 4096)
    launch_k(f16_stage_kernel<kN, 2, kSrc>, blocks, kRmsThreads, 0, x, w.n_in, n_rows, base, xe, ctl, norm_w, eps);
  else
    launch_k(f16_stage_kernel<kN, 8, kSrc>, blocks, kRmsThreads, 0, x, w.n_in, n_rows, base, xe, ctl, norm_w, eps);
  return base;
}

template <int kType, int kN>
void launch(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual, int ctl,
            bool staged) {
  const int64_t rows_pad = (n_rows + kN - 1) / kN * kN;
  uint8_t* base = staged ? mma_scratch_base() : stage<kN>(w, x, n_rows, ctl);
  F16Args a{w, base, exps_of(base, w.n_in, n_rows), int(n_rows), y, residual, ctl};
  const dim3 grid(unsigned(rows_pad / kN), unsigned(((w.n_out + 15) / 16 + kF16Warps - 1) / kF16Warps));
  if constexpr (kN == 128)
    if (w.f16w) {
      const dim3 wide(grid.x, unsigned((w.n_out + w.f16_tile - 1) / w.f16_tile));
      switch (w.f16_tile) {
        case 192:
          return launch_k(f16_wide_gemm_kernel<192>, wide, kWideThreads, wide_smem_bytes(192), a);
        case 224:
          return launch_k(f16_wide_gemm_kernel<224>, wide, kWideThreads, wide_smem_bytes(224), a);
        case 256:
          return launch_k(f16_wide_gemm_kernel<256>, wide, kWideThreads, wide_smem_bytes(256), a);
        default:
          return launch_k(f16_image_gemm_kernel, grid, kImgThreads, kImgSmemBytes, a);
      }
    }
  launch_k(f16_wgmma_kernel<kType, kN>, grid, kF16Warps * 32, f16_smem_bytes(kN), a);
}

template <int kType>
void launch_type(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual, int ctl,
                 bool staged) {
  // 256 rows halve the decode where the grid fills the device twice; staged x and images take 128-row blocks.
  const int64_t col_blocks = ((w.n_out + 15) / 16 + kF16Warps - 1) / kF16Warps;
  if (!staged && !w.f16w && (n_rows + 255) / 256 * col_blocks >= 2 * int64_t(launch_device().sm_count))
    launch<kType, 256>(w, x, n_rows, y, residual, ctl, false);
  else
    launch<kType, 128>(w, x, n_rows, y, residual, ctl, staged);
}

}  // namespace

bool f16_enabled() {
  static const bool on = env_switch("TF_CUDA_PROMPT_F16", 2, "0 keeps prompt rows on the decode products") != 0;
  return on;
}

namespace {
std::atomic<int> g_image_mode{-2};       // -2: not read yet
std::atomic<int> g_image_width{-2};      // -2: not read yet, -1: by the rule below
std::atomic<int64_t> g_fused_stages{0};  // for tests: that the model's prompt rows took these stages
}  // namespace

int f16_image_mode() {
  int m = g_image_mode.load();
  if (m == -2) {
    m = env_switch("TF_CUDA_PROMPT_IMAGE", 2, "0 never keeps prompt images, 1 always; unset: where they fit");
    int unread = -2;
    if (!g_image_mode.compare_exchange_strong(unread, m)) m = unread;  // f16_set_image_mode came first
  }
  return m;
}

void f16_set_image_mode(int mode) {
  if (mode < -1 || mode > 1) throw std::invalid_argument("prompt image mode: -1 (unset), 0 or 1");
  g_image_mode.store(mode);
}

namespace {
// What the format and row length allow, before and after upload (which also needs the values to fit fp16).
bool shape_takes(GgmlType type, int64_t n_in) {
  if (n_in % 256 != 0 || !f16_enabled() || !mma_wgmma_device()) return false;
  if (type == GgmlType::Q4_K) return type_ready<int(GgmlType::Q4_K)>();
  if (type == GgmlType::Q6_K) return type_ready<int(GgmlType::Q6_K)>();
  return false;
}
}  // namespace

bool f16_takes(const DeviceMatrix& w) { return w.mma && w.f16 && shape_takes(w.type, w.n_in); }

size_t f16_scratch_bytes(const DeviceMatrix& w, int64_t n_rows) {
  if (!f16_takes(w) || n_rows <= 0) return 0;
  return align256(size_t(padded_rows(n_rows) * w.n_in) * 2) + align256(size_t(padded_rows(n_rows)) * 4);
}

int f16_image_width_mode() {
  int m = g_image_width.load();
  if (m == -2) {
    const int e = env_switch("TF_CUDA_IMAGE_WIDE", 4,
                             "0 keeps prompt images in blocks of 128 outputs, 1, 2, 3 puts them in 192, 224, 256");
    m = e < 0 ? -1 : (e == 0 ? 128 : 160 + 32 * e);
    int unread = -2;
    if (!g_image_width.compare_exchange_strong(unread, m)) m = unread;  // f16_set_image_width came first
  }
  return m;
}

void f16_set_image_width(int width) {
  if (width != -1 && width != 128 && width != 192 && width != 224 && width != 256)
    throw std::invalid_argument("prompt image width: -1 (the rule), 128, 192, 224 or 256");
  g_image_width.store(width);
}

namespace {
bool width_ready(int width) {
  switch (width) {
    case 128:
      return image_gemm_ready();
    case 192:
      return wide_ready<192>();
    case 224:
      return wide_ready<224>();
    case 256:
      return wide_ready<256>();
    default:
      return false;
  }
}
}  // namespace

int f16_image_width(int64_t n_out) {
  const int forced = f16_image_width_mode();
  if (forced > 0 && width_ready(forced)) return forced;
  // Waves of a 512-row chunk's blocks times an output's cost: wide outputs cost no less (docs/prompt_rows.md).
  constexpr std::pair<int, double> kCost[] = {{128, 1.0}, {192, 1.05}, {224, 1.15}, {256, 1.15}};
  const int64_t sms = launch_device().sm_count;
  int best = 128;
  double best_t = 0;
  for (auto [width, cost] : kCost) {
    const int64_t blocks = 4 * ((n_out + width - 1) / width);
    const double t = double((blocks + sms - 1) / sms) * width * cost;
    if (width == 128 || (t < best_t && width_ready(width))) best = width, best_t = t;
  }
  return best;
}

size_t f16_image_size(const DeviceMatrix& w) {
  if (!f16_takes(w)) return 0;
  const int width = f16_image_width(w.n_out);
  return width_ready(width) ? size_t(f16_image_bytes(w.n_out, w.units, width)) : 0;
}

size_t f16_image_size_for(GgmlType type, int64_t n_in, int64_t n_out) {
  if (!shape_takes(type, n_in)) return 0;
  const int width = f16_image_width(n_out);
  return width_ready(width) ? size_t(f16_image_bytes(n_out, n_in / 64, width)) : 0;
}

namespace {
// w's 16-output tiles [0, tiles) into an image of blocks of `width` outputs, from tile tile0 on.
void build_image(const DeviceMatrix& w, void* dst, int width, int64_t tile0, int64_t tiles, int ctl) {
  DeviceMatrix b = w;
  b.f16_tile = width, b.f16w = nullptr;
  const dim3 grid(unsigned((w.units + 3) / 4), unsigned(tiles));
  if (w.type == GgmlType::Q4_K)
    launch_k(f16_image_kernel<int(GgmlType::Q4_K)>, grid, 128, 0, b, static_cast<uint8_t*>(dst), tile0, ctl);
  else
    launch_k(f16_image_kernel<int(GgmlType::Q6_K)>, grid, 128, 0, b, static_cast<uint8_t*>(dst), tile0, ctl);
}
}  // namespace

void f16_image(DeviceMatrix& w, void* dst, int ctl) {
  if (f16_image_size(w) == 0) throw std::logic_error("CUDA prompt products: this matrix has no prompt image here");
  if (w.f16_seg[0] != 0) throw std::logic_error("CUDA prompt products: a stacked matrix has no weights of its own");
  const int width = f16_image_width(w.n_out);
  build_image(w, dst, width, 0, (w.n_out + width - 1) / width * (width / 16), ctl);
  w.f16_tile = width, w.f16w = static_cast<const uint8_t*>(dst);
}

size_t f16_stack_size_for(const GgmlType* types, const int64_t* n_out, int count, int64_t n_in) {
  if (count < 2 || count > 3) return 0;
  int64_t total = 0;
  for (int i = 0; i < count; ++i) {
    // Every matrix but the last ends on a 16-output tile, so that each tile of the stack is one matrix's.
    if (!shape_takes(types[i], n_in) || n_out[i] <= 0 || (i + 1 < count && n_out[i] % 16 != 0)) return 0;
    total += n_out[i];
  }
  const int width = f16_image_width(total);
  return width != 128 && width_ready(width) ? size_t(f16_image_bytes(total, n_in / 64, width)) : 0;
}

size_t f16_stack_size(const DeviceMatrix* const* ms, int count) {
  if (count < 2 || count > 3) return 0;
  GgmlType types[3];
  int64_t n_out[3];
  for (int i = 0; i < count; ++i) {
    if (!f16_takes(*ms[i]) || ms[i]->n_in != ms[0]->n_in || ms[i]->f16_seg[0] != 0) return 0;
    types[i] = ms[i]->type, n_out[i] = ms[i]->n_out;
  }
  return f16_stack_size_for(types, n_out, count, ms[0]->n_in);
}

DeviceMatrix f16_image_stack(const DeviceMatrix* const* ms, int count, void* dst, int ctl) {
  if (f16_stack_size(ms, count) == 0) throw std::logic_error("CUDA prompt products: these matrices do not stack");
  int64_t total = 0;
  for (int i = 0; i < count; ++i) total += ms[i]->n_out;
  const int width = f16_image_width(total);
  const int64_t all = (total + width - 1) / width * (width / 16);
  DeviceMatrix s = *ms[0];
  int64_t tile0 = 0, first = 0;
  for (int i = 0; i < count; ++i) {  // the last matrix also fills the stack's padding, repeating its last tile
    build_image(*ms[i], dst, width, tile0, i + 1 < count ? ms[i]->n_out / 16 : all - tile0, ctl);
    if (i > 0) s.f16_seg[i - 1] = int(first), s.f16_seg_exp[i - 1] = ms[i]->f16_exp;
    tile0 += ms[i]->n_out / 16, first += ms[i]->n_out;
  }
  s.n_out = total, s.f16_tile = width, s.f16w = static_cast<const uint8_t*>(dst);
  return s;
}

void f16_stage(const DeviceMatrix& w, const float* x, int64_t n_rows, int ctl, bool swiglu) {
  if (!f16_takes(w)) throw std::logic_error("CUDA prompt products: this matrix has no fp16 kernel here");
  g_staged = {};
  if (n_rows <= 0) return;
  if (swiglu)
    stage<128, kStageSwiglu>(w, x, n_rows, ctl), g_fused_stages.fetch_add(1);
  else
    stage<128>(w, x, n_rows, ctl);
  g_staged = {x, w.n_in, n_rows, mma_scratch_epoch()};
}

void f16_stage_norm(const DeviceMatrix& w, const float* x, const float* norm_w, float eps, int64_t n_rows,
                    const float* as, int ctl) {
  if (!f16_takes(w)) throw std::logic_error("CUDA prompt products: this matrix has no fp16 kernel here");
  g_staged = {};
  if (n_rows <= 0) return;
  stage<128, kStageNorm>(w, x, n_rows, ctl, norm_w, eps);
  g_fused_stages.fetch_add(1);
  g_staged = {as, w.n_in, n_rows, mma_scratch_epoch()};
}

int64_t f16_fused_stages() { return g_fused_stages.load(); }

void f16_gemm(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual, int ctl,
              bool staged) {
  if (!f16_takes(w)) throw std::logic_error("CUDA prompt products: this matrix has no fp16 kernel here");
  if (w.f16_seg[0] != 0 && (!w.f16w || w.f16_tile == 128))
    throw std::logic_error("CUDA prompt products: a stacked matrix is read from its wide image only");
  if (n_rows <= 0) return;
  if (staged && (g_staged.x != x || g_staged.n_in != w.n_in || g_staged.n_rows != n_rows ||
                 g_staged.epoch != mma_scratch_epoch()))
    throw std::logic_error(
        "CUDA prompt products: a staged product must follow gemv_prompt_stage of its x, with only "
        "staged products between");
  if (!staged) g_staged = {};
  if (w.type == GgmlType::Q4_K)
    launch_type<int(GgmlType::Q4_K)>(w, x, n_rows, y, residual, ctl, staged);
  else
    launch_type<int(GgmlType::Q6_K)>(w, x, n_rows, y, residual, ctl, staged);
}

}  // namespace tf::cuda
