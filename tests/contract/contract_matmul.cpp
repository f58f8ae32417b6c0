// Contract checks of the CPU matmul kernels: float64 reference, derived bound, row invariance, canary, NaN rows.
#include <fmt/format.h>

#include "backend/cpu/ops.h"
#include "harness.h"
#include "quant/ggml/dequant.h"

namespace tf::contract {
namespace {

struct Shape {
  int64_t n_in, n_out;
};

std::string check_format(GgmlType type, const std::vector<Shape>& shapes) {
  static ThreadPool pool(2);
  std::mt19937 rng(1234 + uint32_t(type));
  const auto info = *ggml_type_info(uint32_t(type));
  for (auto [n_in, n_out] : shapes) {
    auto wbytes = random_weight(type, n_in, n_out, rng);
    cpu::WeightView w{"contract", type, n_in, n_out, wbytes.data(), int64_t(wbytes.size()) / n_out};
    const std::vector<double> wd = decode_weights(type, wbytes, n_in, n_out);
    for (int64_t rows : {1, 2, 3, 5, 7, 16}) {
      auto x = random_floats(size_t(rows * n_in), rng);
      if (rows >= 3) x[size_t(1 * n_in + n_in / 2)] = NAN;  // a non-finite activation must poison its row
      auto y = with_canary(size_t(rows * n_out), size_t(n_out));
      cpu::matmul(w, x.data(), rows, y.data(), pool);
      if (!canary_intact(y, size_t(rows * n_out)))
        return fmt::format("{}: write past the output at {}x{} rows={}", info.name, n_in, n_out, rows);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < n_out; ++o) {
          const auto [ref, s] = ref_dot(wd.data() + o * n_in, x.data() + r * n_in, n_in);
          double got = y[size_t(r * n_out + o)];
          if (std::isnan(ref) != std::isnan(got))
            return fmt::format("{}: row {} col {}: non-finite input gives {} (reference {})", info.name, r, o, got, ref);
          if (std::isnan(ref)) continue;
          double bound = (double(n_in) / 8 + 8) * kU * s;
          if (!(std::fabs(got - ref) <= bound))
            return fmt::format("{}: {}x{} rows={} row {} col {}: |{} - {}| = {:.3g} > bound {:.3g}", info.name, n_in,
                               n_out, rows, r, o, got, ref, std::fabs(got - ref), bound);
        }
        // Row invariance: the same row computed alone has the same bits.
        auto alone = with_canary(size_t(n_out), 1);
        cpu::matmul(w, x.data() + r * n_in, 1, alone.data(), pool);
        int64_t d = first_bit_difference(alone.data(), y.data() + r * n_out, size_t(n_out));
        if (d >= 0)
          return fmt::format("{}: row {} of {} differs from the row alone at col {} ({} vs {})", info.name, r, rows, d,
                             y[size_t(r * n_out + d)], alone[size_t(d)]);
      }
    }
  }
  return {};
}

std::vector<Shape> shapes_for(GgmlType t) {
  if (ggml_type_info(uint32_t(t))->block_elems == 256) return {{1536, 576}, {512, 96}, {256, 33}};
  return {{576, 1536}, {1536, 576}, {576, 192}, {256, 33}, {512, 7}};
}

const bool kRegistered = [] {
  const std::pair<const char*, GgmlType> direct[] = {
      {"f32", GgmlType::F32},   {"f16", GgmlType::F16},   {"bf16", GgmlType::BF16}, {"q4_0", GgmlType::Q4_0},
      {"q4_1", GgmlType::Q4_1}, {"q8_0", GgmlType::Q8_0}, {"q4_k", GgmlType::Q4_K}, {"q6_k", GgmlType::Q6_K}};
  for (auto [name, t] : direct) add_check(std::string("matmul.") + name, [t = t] { return check_format(t, shapes_for(t)); });
  add_check("matmul.generic", [] {
    for (GgmlType t : {GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q5_K}) {
      auto shapes = ggml_type_info(uint32_t(t))->block_elems == 256 ? std::vector<Shape>{{512, 64}, {256, 33}}
                                                                   : std::vector<Shape>{{576, 64}, {512, 33}};
      if (auto why = check_format(t, shapes); !why.empty()) return why;
    }
    return std::string();
  });
  return true;
}();

}  // namespace
}  // namespace tf::contract
