// DeepSeek-V4 mixture of experts on the CPU: sqrtsoftplus router (the bias only for selection, ties to the lower
// expert id; hash layers take tid2eid), clamped SwiGLU experts through the grouped expert GEMM, the shared expert.
#include <algorithm>
#include <cmath>

#include "model/deepseek_v4/dsv4_model.h"
#include "model/deepseek_v4/dsv4_ops.h"

namespace tf::dsv4 {
namespace {

// silu(min(g, lim)) * clip(u, -lim, lim), in place into g.
void clamped_swiglu(float* g, const float* u, int64_t n, double lim) {
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::min(double(g[i]), lim), b = std::clamp(double(u[i]), -lim, lim);
    g[i] = float(a / (1.0 + std::exp(-a)) * b);
  }
}

}  // namespace

void Model::moe(const Layer& L, const std::vector<BatchRow>& rows, const float* x, float* out) {
  const int64_t n = int64_t(rows.size()), D = c_.hidden, E = c_.n_experts, k = c_.top_k, I = c_.moe_inter;
  std::vector<float> lg(size_t(n * E));
  cpu::matmul(L.gate, x, n, lg.data(), pool_);
  std::vector<cpu::ExpertPair> pairs(size_t(n * k));
  std::vector<double> wts(size_t(n * k));
  std::vector<double> s(static_cast<size_t>(E)), sel(static_cast<size_t>(E));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t e = 0; e < E; ++e) {
      const double l = lg[size_t(r * E + e)];
      s[size_t(e)] = std::sqrt(l > 20 ? l : std::log1p(std::exp(l)));  // sqrt(softplus), torch's threshold 20
      sel[size_t(e)] = s[size_t(e)] + (L.hash ? 0.0 : double(L.gate_bias[size_t(e)]));
    }
    std::vector<int32_t> idx;
    if (L.hash) {
      for (int64_t j = 0; j < k; ++j) idx.push_back(int32_t(L.tid2eid[size_t(rows[size_t(r)].token * k + j)]));
    } else {
      idx = top_k(sel.data(), E, k);
    }
    double sum = 0;
    for (int32_t e : idx) sum += s[size_t(e)];
    for (int64_t j = 0; j < k; ++j) {
      pairs[size_t(r * k + j)] = {int32_t(r), idx[size_t(j)]};
      wts[size_t(r * k + j)] = s[size_t(idx[size_t(j)])] / (sum + 1e-20) * c_.routed_scale;
    }
  }
  const int64_t np = n * k;
  std::vector<float> h1(size_t(np * I)), h3(size_t(np * I)), y(size_t(np * D));
  mm_experts(L.w1, x, pairs.data(), np, h1.data());
  mm_experts(L.w3, x, pairs.data(), np, h3.data());
  clamped_swiglu(h1.data(), h3.data(), np * I, c_.swiglu_limit);
  if (qat_)  // the spec's y = W2 (w silu(g) u): with QAT the weight must precede w2's input rounding
    for (int64_t i = 0; i < np; ++i)
      for (int64_t j = 0; j < I; ++j) h1[size_t(i * I + j)] = float(double(h1[size_t(i * I + j)]) * wts[size_t(i)]);
  std::vector<cpu::ExpertPair> down(pairs);
  for (int64_t i = 0; i < np; ++i) down[size_t(i)].row = int32_t(i);  // each pair's own activation row
  mm_experts(L.w2, h1.data(), down.data(), np, y.data());
  std::vector<float> shared(size_t(n * D), 0.0f);
  if (c_.n_shared) {
    const int64_t SI = L.sh_w1.n_out;
    std::vector<float> s1(size_t(n * SI)), s3(size_t(n * SI));
    mm(L.sh_w1, x, n, s1.data());
    mm(L.sh_w3, x, n, s3.data());
    clamped_swiglu(s1.data(), s3.data(), n * SI, c_.swiglu_limit);
    mm(L.sh_w2, s1.data(), n, shared.data());
  }
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < D; ++i) {
      double acc = 0;
      for (int64_t j = 0; j < k; ++j)
        acc += (qat_ ? 1.0 : wts[size_t(r * k + j)]) * double(y[size_t((r * k + j) * D + i)]);
      out[r * D + i] = float(acc + double(shared[size_t(r * D + i)]));
    }
}

}  // namespace tf::dsv4
