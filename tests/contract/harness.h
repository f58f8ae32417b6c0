#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "io/ggml_types.h"

namespace tf::contract {

constexpr double kU = 0x1.0p-24;  // unit roundoff of f32

// One kernel check: returns an empty string when the kernel meets its record, else what broke.
using Check = std::function<std::string()>;
std::map<std::string, Check>& checks();
bool add_check(const std::string& name, Check c);

// Random stored weights of a format: valid blocks with small finite scales.
std::vector<uint8_t> random_weight(GgmlType type, int64_t n_in, int64_t n_out, std::mt19937& rng);
std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f);
// The stored weights decoded exactly by the codec, [n_out, n_in] in double: every matmul kernel's reference input.
std::vector<double> decode_weights(GgmlType type, const std::vector<uint8_t>& w, int64_t n_in, int64_t n_out);
// The float64 dot product of a weight row and an activation row, and its conditioning sum |w_i x_i|.
struct RefDot {
  double y = 0, s = 0;
};
RefDot ref_dot(const double* w, const float* x, int64_t n);

// float64 attention of one query head over keys [0, n_keys) (k(j), v(j): that head's key and value vectors), with
// each output's bound 4 * 2^-24 * sum p_j|v_j| * (head_dim * max_j scale*sum|q k_j| + n_keys + 8).
struct AttnRef {
  std::vector<double> out, bound, mag;  // mag: sum p_j |v_j| per output
  double max_s = 0;                     // max_j scale * sum |q k_j|
};
AttnRef attention_reference(const float* q, int64_t hd, int64_t n_keys, float scale,
                            const std::function<const float*(int64_t)>& k, const std::function<const float*(int64_t)>& v);
// First index where two float arrays differ bitwise, or -1.
int64_t first_bit_difference(const float* a, const float* b, size_t n);

constexpr uint32_t kCanary = 0x7FC0DEADu;
// Output buffer with `pad` canary floats after n values; canary_intact checks them.
std::vector<float> with_canary(size_t n, size_t pad);
bool canary_intact(const std::vector<float>& buf, size_t n);

}  // namespace tf::contract
