#pragma once
#include <cstddef>
#include <cstdint>

#include "io/ggml_types.h"

// Host interface of the CUDA backend's weight kernels; includes no CUDA header, so any module can call it.
namespace tf::cuda {

int device_count();  // 0 without a driver or a device
bool gemv_supports(GgmlType type);
int64_t gemv_block_elems(GgmlType type);  // rows must be whole blocks of this many elements

// Weights on the device, losslessly tiled so a warp reads whole 512-byte lines: 32 columns per tile, each block split
// into 16-byte payload chunks (q) and scales (s); `slices` (warps per column) depends on the shape only.
struct DeviceMatrix {
  GgmlType type = GgmlType::F32;
  const uint8_t* q = nullptr;
  const uint8_t* s = nullptr;
  int64_t n_in = 0, n_out = 0, units = 0;
  int slices = 1;
};
// Elements one unit covers (32 or 256); a row's sums run over ceil(units / slices) units per slice.
int64_t unit_elems(GgmlType type);
size_t device_matrix_bytes(GgmlType type, int64_t n_in, int64_t n_out);
// Repacks a GGUF tensor (host memory, [n_out] rows of blocks) into `dst` (device, device_matrix_bytes long).
DeviceMatrix upload_matrix(GgmlType type, const void* host, int64_t n_in, int64_t n_out, void* dst);

// y[r, o] = sum_c W[o, c] * x[r, c]: a block per tile, a warp per slice, a lane per column; two running sums per
// lane, then the slices in order. Each row's arithmetic is the same whatever n_rows is. x and y are device memory.
// With `residual` (which may be y itself), y = residual + that sum, one rounding, as a separate add would give.
void gemv(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual = nullptr);
// Rows ids[r] of a [n_vocab, n_embd] matrix, decoded exactly, into out [n_rows, n_embd]; ids in device memory.
void embedding(const DeviceMatrix& w, const int32_t* ids, int64_t n_rows, float* out);

void* device_alloc(size_t bytes);
void device_free(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void synchronize();

}  // namespace tf::cuda
