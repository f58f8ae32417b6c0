#pragma once
#include <cstdint>

// The activation roundings DeepSeek-V4 was trained with (quantisation-aware training), applied in place: each block
// scaled by a power of two, rounded to the FP8 E4M3 or FP4 E2M1 grid (nearest, ties to even), scaled back.
namespace tf::quant {

// Nearest E4M3 value (bias 7, 3 mantissa bits, subnormals 2^-9 apart; |v| <= 448 expected), ties to even.
float round_e4m3(float v);
// Nearest E2M1 value (0, .5, 1, 1.5, 2, 3, 4, 6; |v| <= 6 expected), ties to even.
float round_e2m1(float v);

// Blocks of `block` values: s = 2^ceil(log2(amax / 448)), v = s * round_e4m3(v / s). All-zero blocks stay.
void qat_fp8_blocks(float* v, int64_t n, int64_t block);
// Blocks of `block` values: s = 2^ceil(log2(amax / 6)), v = s * round_e2m1(v / s).
void qat_fp4_blocks(float* v, int64_t n, int64_t block);

}  // namespace tf::quant
