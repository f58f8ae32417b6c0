// DeepSeek-V4's per-row helpers against brute force: top-k with ties to the lower index (routing and the indexer),
// the Hadamard rotation's orthonormality, RoPE's inverse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "model/deepseek_v4/dsv4_ops.h"

namespace tf::dsv4 {
namespace {

std::vector<int32_t> brute_top_k(const std::vector<double>& s, int64_t k) {
  std::vector<int32_t> order(s.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return s[size_t(a)] > s[size_t(b)]; });
  order.resize(size_t(k));
  return order;
}

TEST(Dsv4Ops, TopKBreaksTiesToTheLowerIndex) {
  // Every score tied: the first k indices, in order.
  std::vector<double> flat(64, 0.5);
  EXPECT_EQ(top_k(flat.data(), 64, 6), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  // Ties across the cut, among other values, and in several groups.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pick(0, 5);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> s(37);
    for (double& v : s) v = 0.25 * pick(rng);  // six values only: ties everywhere
    for (int64_t k : {1, 2, 6, 8, 37})
      ASSERT_EQ(top_k(s.data(), int64_t(s.size()), k), brute_top_k(s, k)) << "trial " << trial << " k " << k;
  }
}

TEST(Dsv4Ops, HadamardIsOrthonormalAndItsOwnInverse) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> v(64), w;
  for (float& x : v) x = nd(rng);
  w = v;
  hadamard(w.data(), 64);
  double n0 = 0, n1 = 0;
  for (size_t i = 0; i < v.size(); ++i) n0 += double(v[i]) * v[i], n1 += double(w[i]) * w[i];
  EXPECT_NEAR(n1, n0, 1e-5 * n0);
  hadamard(w.data(), 64);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(w[i], v[i], 1e-5f);
  // Column j of the Sylvester matrix: entry i is (-1)^popcount(i & j) / 8 (an identity or a permutation fails here).
  for (int j : {0, 1, 5, 63}) {
    std::vector<float> e(64, 0.0f);
    e[size_t(j)] = 1.0f;
    hadamard(e.data(), 64);
    for (int i = 0; i < 64; ++i)
      EXPECT_EQ(e[size_t(i)], (__builtin_popcount(unsigned(i & j)) % 2 ? -1.0f : 1.0f) / 8) << "j " << j << " i " << i;
  }
}

TEST(Dsv4Ops, RopeInverseRestoresTheRow) {
  std::vector<double> f = {1.0, 0.1, 0.01, 0.001};
  std::vector<float> v = {3.0f, 1.0f, -2.0f, 0.5f, 0.25f, -1.5f, 4.0f, 2.0f, -0.75f, 1.25f}, w = v;
  rope(w.data(), int64_t(w.size()), f, 1234);
  EXPECT_EQ(w[0], v[0]);  // the leading non-rotary values stay
  EXPECT_EQ(w[1], v[1]);
  EXPECT_NE(w[2], v[2]);
  // The first rotary pair (2, 3) turns by pos * f[0], adjacent pairs (NORM), within float rounding of the angle.
  const double a = 1234.0 * f[0];
  EXPECT_NEAR(w[2], -2.0 * std::cos(a) - 0.5 * std::sin(a), 1e-5);
  EXPECT_NEAR(w[3], -2.0 * std::sin(a) + 0.5 * std::cos(a), 1e-5);
  rope(w.data(), int64_t(w.size()), f, 1234, -1.0);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(w[i], v[i], 1e-5f);
}

}  // namespace
}  // namespace tf::dsv4
