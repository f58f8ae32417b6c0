// Contract checks of the CPU kernels for DeepSeek's stored layouts (fp8_block, mxfp4, the grouped expert GEMM):
// float64 reference from the codec's exact decode, derived bound, row invariance, canary, NaN rows.
#include <fmt/format.h>

#include <cstring>

#include "backend/cpu/ops.h"
#include "harness.h"

namespace tf::contract {
namespace {

using quant::ScaledKind;
using quant::ScaledWeight;

// A weight in the stored layout with random codes (NaN codes avoided) and scales in 2^-8 .. 2^1.
struct Stored {
  std::vector<uint8_t> q, s;
  ScaledWeight w;
};
Stored make(ScaledKind kind, int64_t n_in, int64_t n_out, int64_t block, std::mt19937& rng) {
  Stored st;
  st.w = ScaledWeight{"contract", kind, n_in, n_out, block, nullptr, nullptr};
  st.q.resize(size_t(st.w.row_bytes() * n_out));
  for (auto& b : st.q) {
    b = uint8_t(rng());
    if (kind != ScaledKind::Mxfp4 && (b & 0x7F) == 0x7F) b ^= 1;
  }
  st.s.resize(size_t(st.w.scale_bytes()));
  for (size_t i = 0; i < st.s.size(); i += kind == ScaledKind::Fp8F32 ? 4 : 1) {
    if (kind == ScaledKind::Fp8F32) {
      const float f = std::ldexp(1.0f + float(rng() % 1000) / 1000.0f, int(rng() % 10) - 8);
      std::memcpy(st.s.data() + i, &f, 4);
    } else {
      st.s[i] = uint8_t(127 - 8 + rng() % 10);
    }
  }
  st.w.data = st.q.data(), st.w.scale = st.s.data();
  return st;
}

std::string check_one(ScaledKind kind, int64_t n_in, int64_t n_out, int64_t block, std::vector<int64_t> row_counts,
                      std::mt19937& rng) {
  static ThreadPool pool(2);
  Stored st = make(kind, n_in, n_out, block, rng);
  if (kind != ScaledKind::Mxfp4 && kind != ScaledKind::Fp8F32 && n_out > 1) st.s[st.s.size() - 1] = 255;  // NaN scale
  const ScaledWeight& w = st.w;
  const std::vector<double> wd = quant::scaled_decode_f64(w);
  const char* name = quant::scaled_kind_name(kind);
  for (int64_t rows : row_counts) {
    auto x = random_floats(size_t(rows * n_in), rng);
    if (rows >= 3) x[size_t(1 * n_in + n_in / 2)] = NAN;  // a non-finite activation must poison its row
    auto y = with_canary(size_t(rows * n_out), size_t(n_out));
    cpu::matmul_scaled(w, x.data(), rows, y.data(), pool);
    if (!canary_intact(y, size_t(rows * n_out))) return fmt::format("{}: write past the output", name);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < n_out; ++o) {
        const auto [ref, s] = ref_dot(wd.data() + o * n_in, x.data() + r * n_in, n_in);
        const double got = y[size_t(r * n_out + o)];
        if (std::isnan(ref) != std::isnan(got))
          return fmt::format("{}: {}x{} row {} col {}: non-finite gives {} (reference {})", name, n_in, n_out, r, o,
                             got, ref);
        if (std::isnan(ref)) continue;
        const double bound = (double(n_in) / 8 + 8 + (kind == ScaledKind::Fp8F32 ? 1 : 0)) * kU * s;
        if (!(std::fabs(got - ref) <= bound))
          return fmt::format("{}: {}x{} B={} rows={} row {} col {}: |{} - {}| = {:.3g} > {:.3g}", name, n_in, n_out,
                             block, rows, r, o, got, ref, std::fabs(got - ref), bound);
      }
      auto alone = with_canary(size_t(n_out), 1);
      cpu::matmul_scaled(w, x.data() + r * n_in, 1, alone.data(), pool);
      if (int64_t d = first_bit_difference(alone.data(), y.data() + r * n_out, size_t(n_out)); d >= 0)
        return fmt::format("{}: row {} of {} differs from the row alone at col {}", name, r, rows, d);
    }
  }
  return {};
}

std::string check_experts(std::mt19937& rng) {
  static ThreadPool pool(2);
  const int64_t n_in = 256, n_out = 96, n_rows = 11;
  for (ScaledKind kind : {ScaledKind::Mxfp4, ScaledKind::Fp8E8M0}) {
    std::vector<Stored> st;
    std::vector<ScaledWeight> experts;
    for (int e = 0; e < 8; ++e) st.push_back(make(kind, n_in, n_out, kind == ScaledKind::Mxfp4 ? 32 : 128, rng));
    for (auto& s : st) experts.push_back(s.w);
    auto x = random_floats(size_t(n_rows * n_in), rng);
    std::vector<cpu::ExpertPair> pairs;
    for (int i = 0; i < 37; ++i) pairs.push_back({int32_t(rng() % n_rows), int32_t(rng() % 6)});  // 6, 7 unused
    pairs.push_back({3, 7});                                                                     // a lone pair
    auto y = with_canary(pairs.size() * size_t(n_out), size_t(n_out));
    cpu::matmul_experts(experts, x.data(), pairs.data(), int64_t(pairs.size()), y.data(), pool);
    if (!canary_intact(y, pairs.size() * size_t(n_out))) return "experts: write past the output";
    std::vector<float> alone(static_cast<size_t>(n_out));
    for (size_t p = 0; p < pairs.size(); ++p) {
      cpu::matmul_scaled(experts[size_t(pairs[p].expert)], x.data() + pairs[p].row * n_in, 1, alone.data(), pool);
      if (int64_t d = first_bit_difference(alone.data(), y.data() + p * size_t(n_out), size_t(n_out)); d >= 0)
        return fmt::format("experts ({}): pair {} (row {}, expert {}) differs from its row alone at col {}",
                           quant::scaled_kind_name(kind), p, pairs[p].row, pairs[p].expert, d);
    }
  }
  return {};
}

const bool kRegistered = [] {
  add_check("matmul.fp8_block", [] {
    std::mt19937 rng(77);
    for (auto [n_in, n_out, block, big] : {std::tuple<int64_t, int64_t, int64_t, bool>{4096, 1024, 128, true},
                                           {160, 200, 128, false}, {5120, 64, 32, false}, {96, 33, 32, false}})
      if (auto why = check_one(ScaledKind::Fp8E8M0, n_in, n_out, block,
                               big ? std::vector<int64_t>{1, 5} : std::vector<int64_t>{1, 2, 3, 5, 7}, rng);
          !why.empty())
        return why;
    return check_one(ScaledKind::Fp8F32, 256, 40, 128, {1, 2, 3, 5, 7}, rng);
  });
  add_check("matmul.mxfp4", [] {
    std::mt19937 rng(78);
    if (auto why = check_one(ScaledKind::Mxfp4, 5120, 2304, 32, {1, 5}, rng); !why.empty()) return why;
    if (auto why = check_one(ScaledKind::Mxfp4, 2048, 96, 32, {1, 2, 3, 5, 7}, rng); !why.empty()) return why;
    return check_one(ScaledKind::Mxfp4, 64, 7, 32, {1, 2, 3, 5, 7}, rng);
  });
  add_check("matmul.experts", [] {
    std::mt19937 rng(79);
    return check_experts(rng);
  });
  return true;
}();

}  // namespace
}  // namespace tf::contract
