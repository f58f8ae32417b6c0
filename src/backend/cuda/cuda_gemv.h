#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "io/ggml_types.h"

// Host interface of the CUDA backend's weight kernels; includes no CUDA header, so any module can call it.
namespace tf::cuda {

int device_count();  // 0 without a driver or a device
bool gemv_supports(GgmlType type);
int64_t gemv_block_elems(GgmlType type);  // rows must be whole blocks of this many elements

// Weights on the device, losslessly repacked. Products of Q4_0, Q4_1, Q8_0, Q4_K, Q6_K and BF16 rows of whole
// 64-element steps use the tensor-core layout (`mma`): per 16-row tile and 64 columns, each lane's mma fragment values
// as small integers (q), Q6_K's high bits (h), and per 256-column slice each row's block scales (s). Everything else,
// and embedding tables, use the tiled layout: 32 columns per tile, each block split into 16-byte payload chunks (q)
// and scales (s); `slices` (warps per column) depends on the shape only.
struct DeviceMatrix {
  GgmlType type = GgmlType::F32;
  const uint8_t* q = nullptr;
  const uint8_t* s = nullptr;
  const uint8_t* h = nullptr;
  int64_t n_in = 0, n_out = 0, units = 0;
  int slices = 1;
  bool mma = false;
  bool f16 = false;  // Q4_K or Q6_K whose weights fit fp16 under 2^f16_exp: prompt rows may take f16_prompt.cuh
  int f16_exp = 0;
  const uint8_t* f16w = nullptr;  // prompt rows' fp16 weights decoded once (prompt_image_build), or none
  int f16_tile = 128;             // outputs a block of the image holds: 128 (the image as A) or 192, 224, 256 (as B)
  int f16_seg[2] = {0, 0};        // a stacked image (Q|K|V): outputs from f16_seg[i] > 0 on are the next matrix's,
  int f16_seg_exp[2] = {0, 0};    // whose power of two is 2^f16_seg_exp[i]
};
// Elements one unit covers (32 or 256); a row's sums run over ceil(units / slices) units per slice.
int64_t unit_elems(GgmlType type);
// Whether products with this matrix run on tensor cores (a function of format and row length only).
bool mma_layout(GgmlType type, int64_t n_in);
// `table`: the matrix is read by embedding() (tiled layout), not by gemv().
size_t device_matrix_bytes(GgmlType type, int64_t n_in, int64_t n_out, bool table = false);
// Repacks a GGUF tensor (host memory, [n_out] rows of blocks) into `dst` (device, device_matrix_bytes long).
DeviceMatrix upload_matrix(GgmlType type, const void* host, int64_t n_in, int64_t n_out, void* dst, bool table = false);
// Device scratch that gemv() needs for `n_rows` rows; reserve it before a graph capture, which cannot allocate.
size_t gemv_scratch_bytes(const DeviceMatrix& w, int64_t n_rows);
void reserve_gemv_scratch(size_t bytes);
// Changes whenever that scratch moves: a CUDA graph captured under another generation holds a stale address.
uint64_t gemv_scratch_generation();

// y[r, o] = sum_c W[o, c] * x[r, c]. Tiled layout: a block per tile, a warp per slice, a lane per column; two
// running sums per lane, then the slices in order. Tensor-core layout: x split into bf16 hi + lo; per scale group an
// exact integer-weight mma sum, scaled in a fused step; per 256-column slice a partial, the partials added in order.
// Each row's arithmetic is the same whatever n_rows is. x and y are device memory. With `residual` (which may be y
// itself), y = residual + that sum, one rounding, as a separate add would give.
// Activations a producing kernel (rmsnorm, swiglu_pairs) already split for tensor-core products of rows n_in long:
// xs holds n_rows * n_in * 4 bytes, xsum n_rows * n_in / 32 floats. Products of tiled-layout matrices ignore it.
// staged: only since gemv_stage, and only staged products between, so the image in the scratch is still this x's.
struct SplitX {
  void* xs = nullptr;
  float* xsum = nullptr;
  bool staged = false;
};
void gemv(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual = nullptr,
          const SplitX& pre = {});
// rope_store's work for one row of Q, K and V (cuda_ops.h): NORM pairs only; the row's angles, page and position.
struct RopeKv {
  bool on = false;
  int head_dim = 0, half = 0, kv_row = 0;
  const float *cos = nullptr, *sin = nullptr;
  const int32_t *pos = nullptr, *row_seq = nullptr, *page_table = nullptr;
  int64_t max_pages = 0;
  float* base = nullptr;
  int64_t page_floats = 0, layer_offset = 0, page_size = 0;
};
// ys[i] = ws[i] x for one row, 2 or 3 tensor-core matrices of one n_in (Q, K, V) in one launch, each output the bits
// gemv gives it. False, launching nothing, where they cannot share one: not one row, a staged x, mixed lengths, more
// than two formats (or two other than Q4_K and Q6_K), or TF_MMA_GROUP=0. With rope.on (Q, K, V of whole heads), Q is
// written rotated to ys[0] and K rotated and V into the row's page, as rope_store would (ys[1], ys[2] unwritten).
bool gemv_group(const DeviceMatrix* const* ws, float* const* ys, int count, const float* x, int64_t n_rows,
                const SplitX& pre = {}, const RopeKv& rope = {});
bool gemv_group_ropes();  // whether gemv_group takes rope.on at all (TF_MMA_GROUP=2), so callers ask once
// Prompt rows' products (f16_prompt.cuh): row-invariant but not gemv's bits, so only prompt rows may take them.
bool gemv_prompt_takes(const DeviceMatrix& w);  // Q4_K or Q6_K that fit fp16, on compute capability 9.0
// staged: x's image comes from gemv_prompt_stage, with only staged prompt products since (they may run side by side).
void gemv_prompt(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual = nullptr,
                 bool staged = false);
void gemv_prompt_stage(const DeviceMatrix& w, const float* x, int64_t n_rows);
// gemv_prompt_stage of swiglu_pairs(gu), its bits, never storing SwiGLU; the staged products then name gu as x.
void gemv_prompt_stage_swiglu(const DeviceMatrix& w, const float* gu, int64_t n_rows);
// gemv_prompt_stage of rmsnorm(x) into `as`, its bits, never writing `as`; the staged products then name `as` as x.
void gemv_prompt_stage_norm(const DeviceMatrix& w, const float* x, const float* norm_w, float eps, int64_t n_rows,
                            const float* as);
int64_t prompt_fused_stages();  // for tests: how many stages made SwiGLU or RMSNorm themselves in this process
// Bytes of w's prompt image: its fp16 weights as the prompt kernel decodes them, read instead (same bits, no decode).
size_t prompt_image_bytes(const DeviceMatrix& w);  // 0 where gemv_prompt does not take w
// The same before a matrix is uploaded, from its shape: what its image takes if its values fit fp16, which most do.
size_t prompt_image_bytes_for(GgmlType type, int64_t n_in, int64_t n_out);
// TF_CUDA_PROMPT_IMAGE: 0 never, 1 always, -1 (unset) in a quarter of free memory, given back when the engine asks.
int prompt_image_mode();
void set_prompt_image_mode(int mode);  // for tests: as if TF_CUDA_PROMPT_IMAGE were that (-1: unset)
// Outputs a block of the prompt image of an n_out-output matrix holds (128, 192, 224 or 256), chosen at build time.
int prompt_image_width(int64_t n_out);
int set_prompt_image_width(int width);  // images built next take this width (-1: the rule); returns the one before
// Decodes w into dst (device, prompt_image_bytes long) and points w.f16w at it.
void prompt_image_build(DeviceMatrix& w, void* dst);
// One wide image of 2 or 3 matrices' outputs side by side (Q|K|V: one product of one wave); 0 bytes where not possible.
size_t prompt_image_stack_bytes(const std::vector<const DeviceMatrix*>& ms);
size_t prompt_image_stack_bytes_for(const std::vector<GgmlType>& types, int64_t n_in,
                                    const std::vector<int64_t>& n_out);
DeviceMatrix prompt_image_stack(const std::vector<const DeviceMatrix*>& ms, void* dst);
// One stage of x for the next products of its rows that set pre.staged (x unchanged), so they may run side by side.
bool gemv_stage(const DeviceMatrix& w, int64_t n_rows, const SplitX& pre);
// Pulls w (or `head` of each tensor-core tile, at most max_bytes) into L2 on the side stream; returns the bytes asked.
int64_t prefetch_weights(const DeviceMatrix& w, double head, int64_t max_bytes);
// What the pulls of one fork may take together: most of L2, so the last pulled do not evict the first.
int64_t prefetch_budget();
// Slice partials [slices][n_rows][n_out] left for the consuming kernel to add; p is null where y was written.
struct Partials {
  const float* p = nullptr;
  int slices = 0;
};
// gemv, but split slices stay partials: in buf (gemv_partial_floats long) or the scratch until the next product.
Partials gemv_partials(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const SplitX& pre = {},
                       float* buf = nullptr);
int64_t gemv_partial_floats(const DeviceMatrix& w, int64_t n_rows);  // 0 where no product of n_rows leaves partials
int64_t gemv_split_rows();  // the most rows whose products run their slices separately (and keep partials)
// Rows ids[r] of a [n_vocab, n_embd] matrix, decoded exactly, into out [n_rows, n_embd]; ids in device memory.
void embedding(const DeviceMatrix& w, const int32_t* ids, int64_t n_rows, float* out);

void* device_alloc(size_t bytes);
void device_free(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void synchronize();
// A host vector copied into new device memory (freed by device_free).
template <class T>
T* upload(const std::vector<T>& h) {
  auto* p = static_cast<T*>(device_alloc(h.size() * sizeof(T)));
  copy_to_device(p, h.data(), h.size() * sizeof(T));
  return p;
}

}  // namespace tf::cuda
