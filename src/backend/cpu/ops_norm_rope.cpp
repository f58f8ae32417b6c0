#include <cmath>

#include "backend/cpu/ops.h"
#include "backend/ctl.h"

namespace tf::cpu {

void rmsnorm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(xr[i]) * double(xr[i]);
    if (TF_CTL_ON(20)) ss = 0;  // planted: the sum of squares lost, eps alone scales
    float scale = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = (xr[i] * scale) * w[i];
    if (TF_CTL_ON(21)) y[r * n + n] = 0;  // planted: write past the end
  }
}

void rope_angles(int64_t pos, int64_t n_rot, double freq_base, double freq_scale, const float* freq_factors,
                 float* cos_out, float* sin_out) {
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    double theta = freq_scale * double(pos) * std::pow(freq_base, -2.0 * double(i) / double(n_rot));
    if (freq_factors) theta /= double(freq_factors[i]);
    if (TF_CTL_ON(23)) theta = double(float(pos)) * std::pow(float(freq_base), -2.0f * float(i) / float(n_rot));
    cos_out[i] = float(std::cos(theta));
    sin_out[i] = float(std::sin(theta));
  }
}

void rope(float* x, int64_t n_rows, int64_t row_stride, int64_t n_heads, int64_t head_dim, int64_t n_rot,
          const float* cos, const float* sin, RopePairing pairing) {
  const int64_t half = n_rot / 2;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* c = cos + r * half;
    const float* s = sin + r * half;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + r * row_stride + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        int64_t a = pairing == RopePairing::Norm ? 2 * i : i;
        int64_t b = pairing == RopePairing::Norm ? 2 * i + 1 : i + half;
        if (TF_CTL_ON(22)) b = pairing == RopePairing::Norm ? i + half : 2 * i + 1;  // planted: wrong pairing
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * c[i] - x1 * s[i];
        v[b] = x0 * s[i] + x1 * c[i];
      }
    }
  }
}

}  // namespace tf::cpu
