// CUDA RMSNorm and SwiGLU against float64 references, with row invariance and a canary.
#include <fmt/format.h>

#include <iterator>

#include "backend/cuda/cuda_gemv.h"
#include "backend/cuda/cuda_ops.h"
#include "cuda_buf.h"
#include "harness.h"

namespace tf::contract {
namespace {

using DevVec = Buf<float>;

// Many rows' split output (a row's groups in one block) against each row's own call (spread over blocks), bitwise.
template <class Run>
std::string same_rows_split(const char* what, int64_t rows, int64_t n, Run run) {
  DevVec y{std::vector<float>(size_t(rows * n))}, xs{std::vector<float>(size_t(rows * n))},
      xsum{std::vector<float>(size_t(rows * n / 32))};
  DevVec y1{std::vector<float>(size_t(n))}, xs1{std::vector<float>(size_t(n))},
      xsum1{std::vector<float>(size_t(n / 32))};
  run(0, rows, y.p, xs.p, xsum.p);
  const auto Y = y.get(), XS = xs.get(), XSUM = xsum.get();
  for (int64_t r = 0; r < rows; ++r) {
    run(r, 1, y1.p, xs1.p, xsum1.p);
    if (first_bit_difference(y1.get().data(), Y.data() + r * n, size_t(n)) >= 0 ||
        first_bit_difference(xs1.get().data(), XS.data() + r * n, size_t(n)) >= 0 ||
        first_bit_difference(xsum1.get().data(), XSUM.data() + r * n / 32, size_t(n / 32)) >= 0)
      return fmt::format("{} n={} rows={}: row {}'s split output differs from its own call", what, n, rows, r);
  }
  return {};
}

}  // namespace

std::string check_cuda_rmsnorm() {
  std::mt19937 rng(17);
  for (int64_t n : {576, 4096, 64}) {
    for (int64_t rows : {1, 3, 7}) {
      auto x = random_floats(size_t(rows * n), rng, 3.0f), w = random_floats(size_t(n), rng);
      DevVec dx(x), dw(w), dy(with_canary(size_t(rows * n), 4)), d1(with_canary(size_t(n), 4));
      cuda::rmsnorm(dx.p, dw.p, rows, n, 1e-5f, dy.p);
      auto y = dy.get();
      if (!canary_intact(y, size_t(rows * n))) return fmt::format("write past the end at n={} rows={}", n, rows);
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < n; ++i) ss += double(x[size_t(r * n + i)]) * x[size_t(r * n + i)];
        const double inv = 1.0 / std::sqrt(ss / double(n) + 1e-5);
        for (int64_t i = 0; i < n; ++i) {
          const double ref = double(x[size_t(r * n + i)]) * inv * double(w[size_t(i)]);
          if (!(std::fabs(y[size_t(r * n + i)] - ref) <= 4 * kU * std::fabs(ref) + 0x1.0p-126))
            return fmt::format("n={} row {} [{}]: {} vs {}", n, r, i, y[size_t(r * n + i)], ref);
        }
        cuda::rmsnorm(dx.p + r * n, dw.p, 1, n, 1e-5f, d1.p);
        if (first_bit_difference(d1.get().data(), y.data() + r * n, size_t(n)) >= 0)
          return fmt::format("row {} differs when computed alone", r);
      }
    }
  }
  // Many rows take one block a row for the split output, one row spreads its groups over blocks.
  for (int64_t n : {4096, 576}) {
    const int64_t rows = 70;
    DevVec dx(random_floats(size_t(rows * n), rng, 3.0f)), dw(random_floats(size_t(n), rng));
    auto why = same_rows_split("rmsnorm", rows, n, [&](int64_t r0, int64_t k, float* y, float* xs, float* xsum) {
      cuda::rmsnorm(dx.p + r0 * n, dw.p, k, n, 1e-5f, y, xs, xsum);
    });
    if (!why.empty()) return why;
  }
  return {};
}

std::string check_cuda_swiglu() {
  std::mt19937 rng(18);
  for (int64_t n : {14336, 7}) {
    auto g = random_floats(size_t(n), rng, 8.0f), u = random_floats(size_t(n), rng);
    // e^-g near float's largest (where a float division leaves its fast path), subnormal and signed-zero gates
    const float edge[] = {-88.7f, -88.3f, -87.9f, -87.0f, -80.0f, 1e-39f, -1e-39f, 0.0f, -0.0f};
    for (size_t i = 0; i < std::size(edge) && i < g.size(); ++i) g[i] = edge[i];
    DevVec dg(g), du(u), dy{std::vector<float>(static_cast<size_t>(n))};
    cuda::swiglu(dg.p, du.p, dy.p, n);
    auto y = dy.get();
    for (int64_t i = 0; i < n; ++i) {
      // CUDA's expf is within 2 ulp; the division and product add one rounding each.
      const double ref = double(g[size_t(i)]) / (1.0 + std::exp(-double(g[size_t(i)]))) * u[size_t(i)];
      if (!(std::fabs(y[size_t(i)] - ref) <= 8 * kU * std::fabs(ref) + 0x1.0p-140))
        return fmt::format("n={} [{}]: {} vs {}", n, i, y[size_t(i)], ref);
    }
    // Gate and up side by side in rows of 2n: each row equals the separate form bit for bit, whatever the row count.
    for (int64_t rows : {1, 3, 7}) {
      std::vector<float> gu(size_t(rows * 2 * n));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < n; ++i)
          gu[size_t(r * 2 * n + i)] = g[size_t((i + r) % n)],
                                gu[size_t(r * 2 * n + n + i)] = u[size_t((i + 3 * r) % n)];
      DevVec dgu(gu), dz{std::vector<float>(static_cast<size_t>(rows * n))},
          d1{std::vector<float>(static_cast<size_t>(n))};
      cuda::swiglu_pairs(dgu.p, rows, n, dz.p);
      auto z = dz.get();
      for (int64_t r = 0; r < rows; ++r) {
        cuda::swiglu(dgu.p + r * 2 * n, dgu.p + r * 2 * n + n, d1.p, n);
        if (first_bit_difference(d1.get().data(), z.data() + r * n, size_t(n)) >= 0)
          return fmt::format("swiglu_pairs n={} rows={}: row {} differs from the separate form", n, rows, r);
      }
    }
  }
  // A split output of more rows and groups than one wave of warps holds, against each row alone.
  const int64_t n = 14336, rows = 80;
  DevVec dgu(random_floats(size_t(rows * 2 * n), rng, 3.0f));
  return same_rows_split("swiglu_pairs", rows, n, [&](int64_t r0, int64_t k, float* y, float* xs, float* xsum) {
    cuda::swiglu_pairs(dgu.p + r0 * 2 * n, k, n, y, xs, xsum);
  });
}

}  // namespace tf::contract
