#include "quant/scaled/qat.h"

#include <cmath>

#include "base/scalar.h"

namespace tf::quant {
namespace {

// Rounds |v| to a multiple of 2^e (ties to even multiple), keeping the sign.
float round_to_step(float v, int e) {
  const double q = std::ldexp(double(std::fabs(v)), -e);  // exact: a power-of-two scaling
  const double r = std::nearbyint(q);                     // the default rounding mode: ties to even
  return std::copysign(float(std::ldexp(r, e)), v);
}

// The power-of-two scale 2^ceil(log2(amax / top)), computed exactly from the exponent of amax / top.
float pow2_scale(float amax, float top) {
  int e;
  const double m = std::frexp(double(amax) / double(top), &e);  // amax/top = m 2^e, m in [0.5, 1)
  return float(std::ldexp(1.0, m == 0.5 ? e - 1 : e));
}

}  // namespace

float round_e4m3(float v) {
  if (!std::isfinite(v) || v == 0.0f) return v;
  int e;
  std::frexp(std::fabs(v), &e);  // |v| in [2^(e-1), 2^e)
  const int exp = std::max(e - 1, -6);  // subnormals share the smallest normal exponent's spacing
  return round_to_step(v, exp - 3);
}

float round_e2m1(float v) {
  if (!std::isfinite(v) || v == 0.0f) return v;
  int e;
  std::frexp(std::fabs(v), &e);
  const int exp = std::max(e - 1, 0);  // E2M1: exponents 0..2 with 1 mantissa bit, 0.5 below 1
  return round_to_step(v, exp - 1);
}

namespace {

template <class Round>
void qat_blocks(float* v, int64_t n, int64_t block, float top, Round round) {
  for (int64_t b = 0; b < n; b += block) {
    const int64_t m = std::min(block, n - b);
    float amax = 0;
    for (int64_t i = 0; i < m; ++i) amax = std::max(amax, std::fabs(v[b + i]));
    if (!(amax > 0) || !std::isfinite(amax)) continue;
    const float s = pow2_scale(amax, top);
    for (int64_t i = 0; i < m; ++i) v[b + i] = round(v[b + i] / s) * s;
  }
}

}  // namespace

void qat_fp8_blocks(float* v, int64_t n, int64_t block) { qat_blocks(v, n, block, 448.0f, round_e4m3); }
void qat_fp4_blocks(float* v, int64_t n, int64_t block) { qat_blocks(v, n, block, 6.0f, round_e2m1); }

}  // namespace tf::quant
