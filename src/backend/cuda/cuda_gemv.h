#pragma once
#include <cstddef>
#include <cstdint>

#include "io/ggml_types.h"

// Host interface of the CUDA backend's weight kernels; includes no CUDA header, so any module can call it.
namespace tf::cuda {

int device_count();  // 0 without a driver or a device
bool gemv_supports(GgmlType type);
int64_t gemv_block_elems(GgmlType type);  // rows must be whole blocks of this many elements

// A weight matrix in device memory, split losslessly into 16-byte aligned quant payload rows (q) and their block
// scales (s), so every lane reads whole 16-byte chunks; the decode arithmetic is the codec's own.
struct DeviceMatrix {
  GgmlType type = GgmlType::F32;
  const uint8_t* q = nullptr;
  const uint8_t* s = nullptr;
  int64_t n_in = 0, n_out = 0, q_row = 0, s_row = 0;
};
size_t device_matrix_bytes(GgmlType type, int64_t n_in, int64_t n_out);
// Repacks a GGUF tensor (host memory, [n_out] rows of blocks) into `dst` (device, device_matrix_bytes long).
DeviceMatrix upload_matrix(GgmlType type, const void* host, int64_t n_in, int64_t n_out, void* dst);

// y[r, o] = sum_c W[o, c] * x[r, c]: one warp per output column, lanes over 16-byte chunks, a fixed shuffle tree;
// each row's arithmetic is the same whatever n_rows is. x and y are device memory.
void gemv(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y);
// Rows ids[r] of a [n_vocab, n_embd] matrix, decoded exactly, into out [n_rows, n_embd]; ids in device memory.
void embedding(const DeviceMatrix& w, const int32_t* ids, int64_t n_rows, float* out);

void* device_alloc(size_t bytes);
void device_free(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void synchronize();

}  // namespace tf::cuda
