#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_gemv.h"

// Entry points of the tensor-core products (cuda_mma.cu), called by gemv() for matrices in the mma layout.
namespace tf::cuda {

size_t mma_scratch_bytes(const DeviceMatrix& w, int64_t n_rows);
void mma_reserve(size_t bytes);  // grows the shared scratch; refuses to inside a graph capture
uint64_t mma_scratch_generation();
// With pre.xs, x's split comes from its producer and the split kernel is skipped.
// With `defer`, a split product's partials are left (in buf, or the scratch) and described there instead of added.
void mma_gemv(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual, int ctl,
              const SplitX& pre, Partials* defer = nullptr, float* buf = nullptr);
// One row's products of one x (pre's split, else split here) in one launch; false, launching nothing, where not
// possible.
bool mma_group(const DeviceMatrix* const* ws, float* const* ys, int count, const float* x, int64_t n_rows, int ctl,
               const SplitX& pre, const RopeKv& rope);
// Whether few-row products issue their first weight loads before waiting on the kernel before them (PDL): on unless
// TF_MMA_PREWAIT=0. The same bits either way.
bool mma_prewait();
// One-row Q, K and V (mma_group): 0 as separate launches, 1 one launch (default), 2 with RoPE and the KV store in it
// (TF_MMA_GROUP or mma_set_group). All give the same bits; the contract runs 1 and 2.
void mma_set_group(int mode);
int mma_group_mode();
// x's warpgroup-mma image into the scratch once, for products of n_in columns with pre.staged (gemv_stage).
bool mma_stage(const DeviceMatrix& w, int64_t n_rows, const SplitX& pre, int ctl);
int64_t mma_partial_floats(const DeviceMatrix& w, int64_t n_rows);
int64_t mma_split_rows();
// Many-row products on warpgroup mma (sm_90a): 1 on (default), 0 never (TF_MMA_WGMMA=0 or mma_set_wgmma(0)).
// Either kernel gives the same bits; the contract runs both.
void mma_set_wgmma(int mode);
int mma_wgmma_mode();
// Reads TF_MMA_SPLIT, TF_MMA_GROUP, TF_MMA_PREWAIT and TF_MMA_WGMMA now, so a bad value is refused at startup
// (tf::Error).
void mma_read_switches();
int64_t mma_wgmma_launches();  // warpgroup-mma products launched so far in this process
bool mma_wgmma_device();       // whether this device runs the warpgroup-mma build
// The shared scratch, at least `bytes`, for a user other than the products above (whose staged image it clobbers).
uint8_t* mma_scratch_own(size_t bytes);
// Bumped by every writer of the scratch, so a staged image can tell it is still there.
uint64_t mma_scratch_epoch();
uint8_t* mma_scratch_base();  // where it is now (no reservation)
// Prompt rows' fp16 products (cuda_f16.cu); TF_CUDA_PROMPT_F16=0 keeps prompt rows on the products above.
bool f16_enabled();
bool f16_takes(const DeviceMatrix& w);
size_t f16_scratch_bytes(const DeviceMatrix& w, int64_t n_rows);
void f16_gemm(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual, int ctl,
              bool staged = false);
void f16_stage(const DeviceMatrix& w, const float* x, int64_t n_rows, int ctl, bool swiglu = false);
void f16_stage_norm(const DeviceMatrix& w, const float* x, const float* norm_w, float eps, int64_t n_rows,
                    const float* as, int ctl);
int64_t f16_fused_stages();
size_t f16_image_size(const DeviceMatrix& w);
size_t f16_image_size_for(GgmlType type, int64_t n_in, int64_t n_out);  // before upload: if its values fit fp16
// TF_CUDA_PROMPT_IMAGE: 0, 1, or -1 (unset)
int f16_image_mode();
void f16_set_image_mode(int mode);
void f16_image(DeviceMatrix& w, void* dst, int ctl);
// Outputs a block of the image of an n_out-output matrix: TF_CUDA_IMAGE_WIDE, a test's choice, or the rule.
int f16_image_width(int64_t n_out);
int f16_image_width_mode();           // 128, 192, 224 or 256 when forced, -1 for the rule
void f16_set_image_width(int width);  // for tests: -1 (the rule), 128, 192, 224 or 256
size_t f16_stack_size(const DeviceMatrix* const* ms, int count);
size_t f16_stack_size_for(const GgmlType* types, const int64_t* n_out, int count, int64_t n_in);
DeviceMatrix f16_image_stack(const DeviceMatrix* const* ms, int count, void* dst, int ctl);

}  // namespace tf::cuda
