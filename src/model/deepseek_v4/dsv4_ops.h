#pragma once
#include <cstdint>
#include <vector>

#include "model/deepseek_v4/dsv4_config.h"

// The DeepSeek-V4 pieces that are not matrix products, each a pure per-row function (double inside).
namespace tf::dsv4 {

struct HcWeights;

// RoPE frequency of each rotary pair: base rope_theta (window-only layers) or compress_rope_theta with YaRN.
std::vector<double> rope_freqs(const Config& c, bool compress);
// Rotates the trailing 2 * f.size() values of v (interleaved pairs) by pos * f (sign -1: the inverse rotation).
void rope(float* v, int64_t len, const std::vector<double>& f, int64_t pos, double sign = 1.0);
// The orthonormal Walsh-Hadamard rotation H / sqrt(n) of v (n a power of two), in place.
void hadamard(float* v, int64_t n);
// v * rsqrt(mean(v^2) + eps), in place, no weight.
void rms_unweighted(float* v, int64_t n, double eps);

// mHC weights of one row's hc x D streams: pre (collapse), post (expand) and comb (Sinkhorn), spec section 2.1.
void hc_weights(const HcWeights& w, const float* X, int64_t hc, int64_t D, double rms_eps, double hc_eps,
                int64_t iters, double* pre, double* post, double* comb);
// sum_i pre_i X_i over hc streams of D values, in stream order.
void collapse(const double* pre, const float* X, int64_t hc, int64_t D, float* out);
void hc_head_weights(const HcWeights& w, const float* X, int64_t hc, int64_t D, double rms_eps, double hc_eps,
                     double* pre);

// The k largest of score (ties to the lower index), in rank order.
std::vector<int32_t> top_k(const double* score, int64_t n, int64_t k);

}  // namespace tf::dsv4
