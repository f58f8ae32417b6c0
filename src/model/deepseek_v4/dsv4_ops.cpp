#include "model/deepseek_v4/dsv4_ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/ops.h"
#include "model/deepseek_v4/dsv4_model.h"

namespace tf::dsv4 {

std::vector<double> rope_freqs(const Config& c, bool compress) {
  const int64_t rd = c.rope_dim;
  const double base = compress ? c.compress_rope_theta : c.rope_theta;
  std::vector<double> f(size_t(rd / 2));
  for (int64_t i = 0; i < rd / 2; ++i) f[size_t(i)] = 1.0 / std::pow(base, double(2 * i) / double(rd));
  if (compress && c.yarn_orig_ctx > 0) {
    auto corr = [&](double b) {
      return double(rd) * std::log(double(c.yarn_orig_ctx) / (b * 2 * M_PI)) / (2 * std::log(base));
    };
    const double lo = std::max(std::floor(corr(c.yarn_beta_fast)), 0.0);
    double hi = std::min(std::ceil(corr(c.yarn_beta_slow)), double(rd - 1));
    if (lo == hi) hi += 0.001;
    for (int64_t i = 0; i < rd / 2; ++i) {
      const double ramp = std::clamp((double(i) - lo) / (hi - lo), 0.0, 1.0);
      f[size_t(i)] = f[size_t(i)] / c.yarn_factor * ramp + f[size_t(i)] * (1 - ramp);
    }
  }
  return f;
}

void rope(float* v, int64_t len, const std::vector<double>& f, int64_t pos, double sign) {
  // The angles from V4's own frequencies (YaRN on compressed layers); the rotation is the CPU backend's kernel.
  const int64_t rd = 2 * int64_t(f.size());
  float c[256], s[256];
  for (size_t i = 0; i < f.size(); ++i) {
    const double ang = double(pos) * f[i];
    c[i] = float(std::cos(ang)), s[i] = float(sign * std::sin(ang));
  }
  cpu::rope(v + len - rd, 1, 0, 1, rd, rd, c, s, cpu::RopePairing::Norm);
}

void hadamard(float* v, int64_t n) {
  std::vector<double> a(v, v + n);
  for (int64_t h = 1; h < n; h *= 2)
    for (int64_t i = 0; i < n; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const double x = a[size_t(j)], y = a[size_t(j + h)];
        a[size_t(j)] = x + y, a[size_t(j + h)] = x - y;
      }
  const double s = 1.0 / std::sqrt(double(n));
  for (int64_t i = 0; i < n; ++i) v[i] = float(a[size_t(i)] * s);
}

void rms_unweighted(float* v, int64_t n, double eps) {
  thread_local std::vector<float> ones, out;  // the CPU backend's RMSNorm with a unit weight
  if (int64_t(ones.size()) < n) ones.assign(size_t(n), 1.0f), out.resize(size_t(n));
  cpu::rmsnorm(v, ones.data(), 1, n, float(eps), out.data());
  std::copy_n(out.data(), n, v);
}

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// m = fn . (X flattened, RMS-normalised without a weight), one value per fn row.
void mixes(const std::vector<double>& fn, const float* X, int64_t width, int64_t n_out, double eps, double* m) {
  double ss = 0;
  for (int64_t i = 0; i < width; ++i) ss += double(X[i]) * double(X[i]);
  const double inv = 1.0 / std::sqrt(ss / double(width) + eps);
  for (int64_t o = 0; o < n_out; ++o) {
    double s = 0;
    const double* w = fn.data() + o * width;
    for (int64_t i = 0; i < width; ++i) s += w[i] * (double(X[i]) * inv);
    m[o] = s;
  }
}

}  // namespace

void hc_weights(const HcWeights& w, const float* X, int64_t hc, int64_t D, double rms_eps, double hc_eps,
                int64_t iters, double* pre, double* post, double* comb) {
  double m[16 + 16 + 256];
  mixes(w.fn, X, hc * D, (2 + hc) * hc, rms_eps, m);
  for (int64_t i = 0; i < hc; ++i) {
    pre[i] = sigmoid(m[i] * w.scale[0] + w.base[size_t(i)]) + hc_eps;
    post[i] = 2 * sigmoid(m[hc + i] * w.scale[1] + w.base[size_t(hc + i)]);
  }
  for (int64_t i = 0; i < hc; ++i) {  // row i: softmax over j, then + eps
    double* row = comb + i * hc;
    double mx = -INFINITY;
    for (int64_t j = 0; j < hc; ++j) {
      row[j] = m[2 * hc + i * hc + j] * w.scale[2] + w.base[size_t(2 * hc + i * hc + j)];
      mx = std::max(mx, row[j]);
    }
    double s = 0;
    for (int64_t j = 0; j < hc; ++j) s += (row[j] = std::exp(row[j] - mx));
    for (int64_t j = 0; j < hc; ++j) row[j] = row[j] / s + hc_eps;
  }
  auto cols = [&] {
    for (int64_t j = 0; j < hc; ++j) {
      double s = 0;
      for (int64_t i = 0; i < hc; ++i) s += comb[i * hc + j];
      for (int64_t i = 0; i < hc; ++i) comb[i * hc + j] /= (s + hc_eps);
    }
  };
  auto rows = [&] {
    for (int64_t i = 0; i < hc; ++i) {
      double s = 0;
      for (int64_t j = 0; j < hc; ++j) s += comb[i * hc + j];
      for (int64_t j = 0; j < hc; ++j) comb[i * hc + j] /= (s + hc_eps);
    }
  };
  cols();
  for (int64_t it = 1; it < iters; ++it) rows(), cols();
}

void collapse(const double* pre, const float* X, int64_t hc, int64_t D, float* out) {
  for (int64_t j = 0; j < D; ++j) {
    double s = 0;
    for (int64_t i = 0; i < hc; ++i) s += pre[i] * double(X[i * D + j]);
    out[j] = float(s);
  }
}

void hc_head_weights(const HcWeights& w, const float* X, int64_t hc, int64_t D, double rms_eps, double hc_eps,
                     double* pre) {
  double m[16];
  mixes(w.fn, X, hc * D, hc, rms_eps, m);
  for (int64_t i = 0; i < hc; ++i) pre[i] = sigmoid(m[i] * w.scale[0] + w.base[size_t(i)]) + hc_eps;
}

std::vector<int32_t> top_k(const double* score, int64_t n, int64_t k) {
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min(k, n);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return score[a] != score[b] ? score[a] > score[b] : a < b;
  });
  idx.resize(size_t(k));
  return idx;
}

}  // namespace tf::dsv4
