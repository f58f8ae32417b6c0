#pragma once
#include <cstdint>

#include "quant/scaled/scaled.h"

namespace tf::cpu {

// One stored row of an fp8_block or mxfp4 weight: its element bytes and its row of the scale grid.
struct ScaledRow {
  quant::ScaledKind kind;
  const uint8_t* q;
  const uint8_t* scale;
  int64_t block;
};

// out[r] = dot(row, x + r * x_stride) for r < nr (1..4), decoding 32-element groups with their scale; the same
// accumulation as every other format (dot_kernels.h), so a row's bits never depend on nr. n_in: a multiple of 32.
void dot_tile_scaled(const ScaledRow& w, int64_t n_in, const float* x, int64_t x_stride, int nr, float* out,
                     int64_t out_stride);

}  // namespace tf::cpu
