// CUDA kernel contract: float64 reference, derived bound, row invariance over 1..64 rows, canary, planted controls.
// Exits 77 (CTest: skipped) when no CUDA device is present.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>

#include "backend/ctl.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_gemv.h"
#include "backend/cuda/cuda_mma.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/kernel_registry.h"
#include "base/scalar.h"
#include "cuda_buf.h"
#include "harness.h"
#include "quant/ggml/dequant.h"

namespace tf::contract {
// The decoding prompt product of m, with no planted control (contract_cuda_stack.cpp): what images must equal.
std::vector<float> prompt_plain(const cuda::DeviceMatrix& m, const float* dx, int64_t rows);

// |min| of each weight (w = scale * q + min) for the formats with mins: the tensor-core bound's magnitude term.
std::vector<double> min_magnitudes(GgmlType type, const std::vector<uint8_t>& wb, int64_t n_in, int64_t n_out) {
  std::vector<double> mn(size_t(n_in * n_out), 0.0);
  auto f16 = [&](size_t at) { return double(f16_to_f32(uint16_t(wb[at] | (wb[at + 1] << 8)))); };
  for (int64_t i = 0; i < n_in * n_out; ++i) {
    if (type == GgmlType::Q4_1) {
      mn[size_t(i)] = std::fabs(f16(size_t(i / 32) * 20 + 2));
    } else if (type == GgmlType::Q4_K) {
      const size_t blk = size_t(i / 256) * 144;
      const int j = int(i % 256) / 32;
      const uint8_t* sc = wb.data() + blk + 4;
      const int m = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
      mn[size_t(i)] = std::fabs(f16(blk + 2) * m);
    }
  }
  return mn;
}

namespace {

// The residual form in place (y = res + W x, one rounding) against the separate add of y; `run(out)` computes it.
std::string residual_differs(const std::vector<float>& y, int64_t n, const Mem& dy, std::mt19937& rng,
                             const std::function<void(float*)>& run) {
  auto res = random_floats(size_t(n), rng);
  cuda::copy_to_device(dy.p, res.data(), res.size() * 4);
  run(dy.as<float>());
  std::vector<float> fused(res.size());
  cuda::copy_to_host(fused.data(), dy.p, fused.size() * 4);
  for (size_t i = 0; i < fused.size(); ++i) {
    const float want = res[i] + y[i];
    if (std::memcmp(&want, &fused[i], 4) != 0 && !(std::isnan(want) && std::isnan(fused[i])))
      return fmt::format("residual form differs at {}: {} vs {}", i, fused[i], want);
  }
  return {};
}

// `table`: the tiled layout (a warp per slice, lane per column); else the tensor-core layout, for formats that have it.
std::string check_gemv(GgmlType type, bool table, int64_t min_rows = 1) {
  std::mt19937 rng(4321 + uint32_t(type) + (table ? 0 : 99));
  const bool k_quant = type == GgmlType::Q4_K || type == GgmlType::Q6_K;
  const int64_t last_in = k_quant ? 256 : table ? 32 : 64;
  for (auto [n_in, n_out] : {std::pair<int64_t, int64_t>{k_quant ? 768 : 576, 1536},
                             {1536, k_quant ? 512 : 576},
                             {4096, 64},
                             {last_in, 33},
                             {4608, 2056}}) {  // 129 tiles, 18 slices: a block per tile, two rounds at 32 rows
    auto wb = random_weight(type, n_in, n_out, rng);
    const std::vector<double> wd = decode_weights(type, wb, n_in, n_out);
    const std::vector<double> mins = min_magnitudes(type, wb, n_in, n_out);
    Mem dw(cuda::device_matrix_bytes(type, n_in, n_out, table));
    const cuda::DeviceMatrix m = cuda::upload_matrix(type, wb.data(), n_in, n_out, dw.p, table);
    if (m.mma == table) return fmt::format("{}: {} layout expected", ggml_type_name(type), table ? "tiled" : "mma");
    // Up to 32 rows: the slice kernel with 1-4 row tiles; beyond: the many-row kernel, with partial tiles and blocks.
    const bool big = n_out > 2048;  // the reference on every 5th column and the last 16, for time
    std::vector<int64_t> row_counts =
        table ? std::vector<int64_t>{1, 2, 3, 7, 16, 64} : std::vector<int64_t>{1, 2, 3, 7, 16, 24, 32, 40, 64, 100};
    if (big) row_counts = {1, 3, 16, 32, 40};
    for (int64_t rows : row_counts) {
      if (rows < min_rows) continue;
      auto x = random_floats(size_t(rows * n_in), rng);
      if (rows >= 3) x[size_t(n_in + n_in / 2)] = NAN;
      Mem dx(x.size() * 4), dy(size_t((rows + 1) * n_out) * 4), d1(size_t(2 * n_out) * 4);
      cuda::copy_to_device(dx.p, x.data(), x.size() * 4);
      auto y = with_canary(size_t(rows * n_out), size_t(n_out));
      cuda::copy_to_device(dy.p, y.data(), y.size() * 4);
      cuda::gemv(m, dx.as<float>(), rows, dy.as<float>());
      cuda::copy_to_host(y.data(), dy.p, y.size() * 4);
      if (!canary_intact(y, size_t(rows * n_out)))
        return fmt::format("{}: write past the output", ggml_type_name(type));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < n_out; ++o) {
          if (big && o % 5 != 0 && o < n_out - 16) continue;
          const auto [ref, s] = ref_dot(wd.data() + o * n_in, x.data() + r * n_in, n_in);
          double got = y[size_t(r * n_out + o)];
          if (std::isnan(ref) != std::isnan(got))
            return fmt::format("{}: row {} col {}: non-finite input gives {}", ggml_type_name(type), r, o, got);
          // Two fused running sums per lane over ceil(units/slices) units, their sum, then the slices in order.
          const double chain = double((m.units + m.slices - 1) / m.slices) * double(cuda::unit_elems(type)) / 2;
          double bound = (chain + m.slices + 2) * kU * s;
          if (m.mma) {  // x = hi + lo within 2^-16|x|; per group 2G exact products summed in the mma (2^-22 each,
                        // truncating), scale and min fused per group, the slices in order, 32-term column sums
            const double G = type == GgmlType::Q6_K ? 16 : 32, per_slice = 256 / G;
            double mag = s;
            for (int64_t i = 0; i < n_in; ++i)
              mag += mins[size_t(o * n_in + i)] * std::fabs(double(x[size_t(r * n_in + i)]));
            bound = (0x1.0p-16 + (2 * G + 4) * 0x1.0p-22 + (2 * per_slice + m.slices + 34) * kU) * mag;
          }
          if (!std::isnan(ref) && !(std::fabs(got - ref) <= bound))
            return fmt::format("{}: {}x{} rows={} row {} col {}: |{} - {}| > {:.3g}", ggml_type_name(type), n_in, n_out,
                               rows, r, o, got, ref, bound);
        }
        std::vector<float> alone(static_cast<size_t>(n_out));
        cuda::gemv(m, dx.as<float>() + r * n_in, 1, d1.as<float>());
        cuda::copy_to_host(alone.data(), d1.p, alone.size() * 4);
        if (int64_t d = first_bit_difference(alone.data(), y.data() + r * n_out, size_t(n_out)); d >= 0)
          return fmt::format("{}: row {} of {} differs from the row alone at col {}", ggml_type_name(type), r, rows, d);
      }
      if (std::string why = residual_differs(y, rows * n_out, dy, rng,
                                             [&](float* out) { cuda::gemv(m, dx.as<float>(), rows, out, out); });
          !why.empty())
        return fmt::format("{}: {}", ggml_type_name(type), why);
    }
  }
  return {};
}

// Output o of one x row in float64, and prompt.*'s bound on it: x and the weights' scales, mins and values each one
// fp16 rounding under powers of two, one f32 tensor-core chain.
struct PromptRef {
  double y = 0, bound = 0;
};
PromptRef prompt_reference(const std::vector<double>& wd, const std::vector<double>& mins, const float* xr,
                           int64_t n_in, int64_t o, int f16_exp) {
  float mx = 0.0f;
  for (int64_t i = 0; i < n_in; ++i)
    if (std::isfinite(xr[i])) mx = std::max(mx, std::fabs(xr[i]));
  int ex = 0;
  if (mx > 0) std::frexp(mx, &ex);
  const double inv_er = mx > 0 ? std::ldexp(1.0, ex - 15) : 1.0, inv_ew = std::ldexp(1.0, -f16_exp);
  double mag = 0, sx = 0, wsum = 0;
  for (int64_t i = 0; i < n_in; ++i) {
    const double ax = std::fabs(double(xr[i])),
                 aw = std::fabs(wd[size_t(o * n_in + i)]) + 2 * mins[size_t(o * n_in + i)];
    mag += aw * ax, sx += ax, wsum += aw;
  }
  const double u = 0x1.0p-11;
  return {ref_dot(wd.data() + o * n_in, xr, n_in).y, (3 * u + 3 * u * u + double(n_in / 16 + 18) * 0x1.0p-22) * mag +
                                                         0x1.0p-24 * (inv_er * wsum + 33 * inv_ew * sx)};
}

// Prompt rows' fp16 products (f16_prompt.cuh): float64 reference, their bound, each row alone, residual form. With
// `image`, every product reads the weights' prompt image, which must also equal the decoding product bit for bit.
// A `width` past 128 builds wide images, bit-equal to the decoding product, so their cases skip its float64 bound.
std::string check_prompt(GgmlType type, bool image, int width = -1) {
  std::mt19937 rng(8765 + uint32_t(type) + uint32_t(width > 128 ? width : 0));
  struct Width {  // images after this check take the width they took before it
    int before;
    ~Width() { cuda::set_prompt_image_width(before); }
  } keep{cuda::set_prompt_image_width(width)};
  const std::string name =
      std::string(ggml_type_name(type)) + (image ? " image" : "") + (width > 0 ? fmt::format(" of {}", width) : "");
  for (auto [n_in, n_out] :
       {std::pair<int64_t, int64_t>{768, 1536}, {1536, 520}, {256, 33}, {4608, 2056}, {256, 16896}}) {
    auto wb = random_weight(type, n_in, n_out, rng);
    const std::vector<double> wd = decode_weights(type, wb, n_in, n_out);
    const std::vector<double> mins = min_magnitudes(type, wb, n_in, n_out);
    Mem dw(cuda::device_matrix_bytes(type, n_in, n_out));
    cuda::DeviceMatrix m = cuda::upload_matrix(type, wb.data(), n_in, n_out, dw.p);
    if (!cuda::gemv_prompt_takes(m)) {
      if (cuda::mma_wgmma_device()) return name + ": a compute capability 9.0 device refused the prompt kernel";
      return {};  // launched nowhere else: prompt rows elsewhere take gemv
    }
    const size_t img_bytes = cuda::prompt_image_bytes(m);
    if (image && img_bytes == 0) return name + ": the device takes prompt products but not their image";
    Mem dimg(image ? img_bytes + 256 : 16);
    if (image) {  // a canary after the image: its builder writes exactly prompt_image_bytes
      std::vector<uint8_t> tail(256, 0xA5), back(256);
      cuda::copy_to_device(dimg.as<uint8_t>() + img_bytes, tail.data(), tail.size());
      cuda::prompt_image_build(m, dimg.p);
      cuda::copy_to_host(back.data(), dimg.as<uint8_t>() + img_bytes, back.size());
      if (back != tail) return name + ": the image builder wrote past its end";
      if (width > 0 && m.f16_tile != width) return fmt::format("{}: built in blocks of {}", name, m.f16_tile);
    }
    const bool wide = n_out > 4096, big = n_out > 2048;  // the reference on every 5th column and the last 16
    std::vector<int64_t> row_counts = {1, 2, 3, 7, 16, 64, 100, 130, 300};
    if (big) row_counts = wide ? std::vector<int64_t>{1, 3, 300} : std::vector<int64_t>{1, 3, 16, 40};
    for (int64_t rows : row_counts) {
      auto x = random_floats(size_t(rows * n_in), rng);
      for (int64_t r = 0; r < rows; ++r)  // rows of very different magnitudes: each keeps its own power of two
        for (int64_t i = 0; i < n_in; ++i) x[size_t(r * n_in + i)] *= std::ldexp(1.0f, int(r % 5) * 9 - 18);
      if (rows >= 3) x[size_t(n_in + n_in / 2)] = NAN;
      Mem dx(x.size() * 4), dy(size_t((rows + 1) * n_out) * 4), d1(size_t(2 * n_out) * 4);
      cuda::copy_to_device(dx.p, x.data(), x.size() * 4);
      auto y = with_canary(size_t(rows * n_out), size_t(n_out));
      cuda::copy_to_device(dy.p, y.data(), y.size() * 4);
      cuda::gemv_prompt(m, dx.as<float>(), rows, dy.as<float>());
      cuda::copy_to_host(y.data(), dy.p, y.size() * 4);
      if (!canary_intact(y, size_t(rows * n_out))) return name + ": write past the output";
      if (image)
        if (int64_t d =
                first_bit_difference(prompt_plain(m, dx.as<float>(), rows).data(), y.data(), size_t(rows * n_out));
            d >= 0)
          return fmt::format("{}: {}x{} rows={}: differs from the decoding product at {}", name, n_in, n_out, rows, d);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < n_out && width <= 128; ++o) {
          if (big && o % 5 != 0 && o < n_out - 16) continue;
          const auto [ref, bound] = prompt_reference(wd, mins, x.data() + r * n_in, n_in, o, m.f16_exp);
          const double got = y[size_t(r * n_out + o)];
          if (std::isnan(ref) != std::isnan(got))
            return fmt::format("{}: row {} col {}: non-finite input gives {}", name, r, o, got);
          if (!std::isnan(ref) && !(std::fabs(got - ref) <= bound))
            return fmt::format("{}: {}x{} rows={} row {} col {}: |{} - {}| > {:.3g}", name, n_in, n_out, rows, r, o,
                               got, ref, bound);
        }
        std::vector<float> alone(static_cast<size_t>(n_out));
        cuda::gemv_prompt(m, dx.as<float>() + r * n_in, 1, d1.as<float>());
        cuda::copy_to_host(alone.data(), d1.p, alone.size() * 4);
        if (int64_t d = first_bit_difference(alone.data(), y.data() + r * n_out, size_t(n_out)); d >= 0)
          return fmt::format("{}: {}x{} row {} of {} differs from the row alone at col {}", name, n_in, n_out, r, rows,
                             d);
      }
      {  // x staged once for several products (gemv_prompt_stage) gives the same bits
        Mem d2(size_t(rows * n_out) * 4);
        cuda::gemv_prompt_stage(m, dx.as<float>(), rows);
        cuda::gemv_prompt(m, dx.as<float>(), rows, d2.as<float>(), nullptr, true);
        std::vector<float> staged(size_t(rows * n_out));
        cuda::copy_to_host(staged.data(), d2.p, staged.size() * 4);
        if (int64_t d = first_bit_difference(staged.data(), y.data(), staged.size()); d >= 0)
          return fmt::format("{}: {}x{} rows={}: the staged product differs at {}", name, n_in, n_out, rows, d);
      }
      if (std::string why = residual_differs(y, rows * n_out, dy, rng,
                                             [&](float* out) { cuda::gemv_prompt(m, dx.as<float>(), rows, out, out); });
          !why.empty())
        return name + ": " + why;
    }
  }
  return {};
}

// What a fused stage makes its x from: gate|up rows of 2 n_in for SwiGLU, or x rows and RMSNorm's weights.
struct FusedStage {
  bool norm = false;
  int wide = -1;  // SwiGLU's rows past 4,096 columns (another block shape) alone (1), the others alone (0), or all
  int64_t stride(int64_t n_in) const { return norm ? n_in : 2 * n_in; }
};

// A product whose stage makes its own x (gemv_prompt_stage_swiglu, gemv_prompt_stage_norm): bit for bit the kernel
// that stores that x (swiglu_pairs, rmsnorm) then the product staging it itself, with and without the residual; within
// the product's bound over the stored values plus their distance from float64 ones; each row alone.
std::string check_prompt_fused_stage(GgmlType type, FusedStage fs) {
  std::mt19937 rng(6543 + uint32_t(type) + (fs.norm ? 7 : 0));
  const std::string name = std::string(ggml_type_name(type)) + (fs.norm ? " rmsnorm stage" : " swiglu stage");
  const float eps = 1e-5f;
  // 28,672 columns: past the 16,384 a thread's registers keep, the stage reads its later chunks again.
  for (auto [F, n_out] : {std::pair<int64_t, int64_t>{256, 33}, {1536, 520}, {14336, 160}, {28672, 33}}) {
    if (fs.wide >= 0 && (F > 4096) != (fs.wide == 1)) continue;
    auto wb = random_weight(type, F, n_out, rng);
    const std::vector<double> wd = decode_weights(type, wb, F, n_out);
    const std::vector<double> mins = min_magnitudes(type, wb, F, n_out);
    Mem dw(cuda::device_matrix_bytes(type, F, n_out));
    cuda::DeviceMatrix m = cuda::upload_matrix(type, wb.data(), F, n_out, dw.p);
    if (!cuda::gemv_prompt_takes(m))
      return cuda::mma_wgmma_device() ? name + ": a compute capability 9.0 device refused the prompt kernel" : "";
    const std::vector<float> nw = random_floats(size_t(F), rng, 2.0f);
    Mem dnw(nw.size() * 4);
    cuda::copy_to_device(dnw.p, nw.data(), nw.size() * 4);
    const int64_t S = fs.stride(F);
    const bool big = F > 4096;
    for (int64_t rows :
         big ? std::vector<int64_t>{1, 3, 130} : std::vector<int64_t>{1, 2, 3, 7, 16, 64, 100, 130, 300}) {
      std::vector<float> in = random_floats(size_t(rows * S), rng, fs.norm ? 1.0f : 8.0f);
      for (int64_t r = 0; r < rows; ++r)  // rows of very different magnitudes (SwiGLU: its up values)
        for (int64_t i = fs.norm ? 0 : F; i < S; ++i) in[size_t(r * S + i)] *= std::ldexp(1.0f, int(r % 5) * 9 - 18);
      if (rows >= 3) in[size_t(S + F / 2)] = NAN;
      Mem din(in.size() * 4), dx(size_t(rows * F) * 4), dy(size_t((rows + 1) * n_out) * 4), d1(size_t(2 * n_out) * 4);
      Mem das(size_t(rows * F) * 4);  // what the norm stage names as its x: it must never be written
      const std::vector<float> untouched(size_t(rows * F), std::bit_cast<float>(kCanary));
      cuda::copy_to_device(das.p, untouched.data(), untouched.size() * 4);
      cuda::copy_to_device(din.p, in.data(), in.size() * 4);
      // x as the storing kernel leaves it, and the product of it, with no control planted.
      auto plain = [&](const float* res, float* y) {
#if defined(TF_CTL) && TF_CTL
        const int ctl = g_active_control;
        g_active_control = 0;
#endif
        if (fs.norm)
          cuda::rmsnorm(din.as<float>(), dnw.as<float>(), rows, F, eps, dx.as<float>());
        else
          cuda::swiglu_pairs(din.as<float>(), rows, F, dx.as<float>());
        cuda::gemv_prompt(m, dx.as<float>(), rows, y, res);
#if defined(TF_CTL) && TF_CTL
        g_active_control = ctl;
#endif
      };
      auto fused = [&](int64_t r0, int64_t k, const float* res, float* y) {
        const float* src = din.as<float>() + r0 * S;
        if (fs.norm)
          cuda::gemv_prompt_stage_norm(m, src, dnw.as<float>(), eps, k, das.as<float>());
        else
          cuda::gemv_prompt_stage_swiglu(m, src, k);
        cuda::gemv_prompt(m, fs.norm ? das.as<float>() : src, k, y, res, true);
      };
      std::vector<float> x(size_t(rows * F)), want(size_t(rows * n_out));
      plain(nullptr, dy.as<float>());
      cuda::copy_to_host(x.data(), dx.p, x.size() * 4);
      cuda::copy_to_host(want.data(), dy.p, want.size() * 4);
      auto y = with_canary(size_t(rows * n_out), size_t(n_out));
      cuda::copy_to_device(dy.p, y.data(), y.size() * 4);
      fused(0, rows, nullptr, dy.as<float>());
      cuda::copy_to_host(y.data(), dy.p, y.size() * 4);
      if (!canary_intact(y, size_t(rows * n_out))) return name + ": write past the output";
      std::vector<float> as_after(untouched.size());
      cuda::copy_to_host(as_after.data(), das.p, as_after.size() * 4);
      if (std::memcmp(as_after.data(), untouched.data(), untouched.size() * 4) != 0)
        return name + ": the stage wrote the buffer its products name as x";
      if (int64_t d = first_bit_difference(want.data(), y.data(), want.size()); d >= 0)
        return fmt::format("{}: {}x{} rows={}: differs from storing x then the product at {} ({} vs {})", name, F,
                           n_out, rows, d, y[size_t(d)], want[size_t(d)]);
      for (int64_t r = 0; r < rows; ++r) {
        const float* ir = in.data() + r * S;
        std::vector<double> x64(static_cast<size_t>(F));
        double ss = 0;
        for (int64_t i = 0; i < F; ++i) ss += double(ir[i]) * double(ir[i]);
        for (int64_t i = 0; i < F; ++i)
          x64[size_t(i)] = fs.norm ? double(ir[i]) / std::sqrt(ss / double(F) + double(eps)) * double(nw[size_t(i)])
                                   : double(ir[i]) / (1 + std::exp(-double(ir[i]))) * double(ir[F + i]);
        for (int64_t o = 0; o < n_out; ++o) {
          if (big && o % 5 != 0 && o < n_out - 16) continue;
          const PromptRef p = prompt_reference(wd, mins, x.data() + r * F, F, o, m.f16_exp);
          double ref = 0, off = 0;  // the float64 product of float64 x; how far the stored x's values move it
          for (int64_t i = 0; i < F; ++i)
            ref += wd[size_t(o * F + i)] * x64[size_t(i)],
                off += std::fabs(wd[size_t(o * F + i)]) * std::fabs(double(x[size_t(r * F + i)]) - x64[size_t(i)]);
          const double got = y[size_t(r * n_out + o)], bound = p.bound + off;
          if (std::isnan(ref) != std::isnan(got))
            return fmt::format("{}: row {} col {}: non-finite input gives {}", name, r, o, got);
          if (!std::isnan(ref) && !(std::fabs(got - ref) <= bound))
            return fmt::format("{}: {}x{} rows={} row {} col {}: |{} - {}| > {:.3g}", name, F, n_out, rows, r, o, got,
                               ref, bound);
        }
        fused(r, 1, nullptr, d1.as<float>());
        std::vector<float> alone(static_cast<size_t>(n_out));
        cuda::copy_to_host(alone.data(), d1.p, alone.size() * 4);
        if (int64_t d = first_bit_difference(alone.data(), y.data() + r * n_out, size_t(n_out)); d >= 0)
          return fmt::format("{}: {}x{} row {} of {} differs from the row alone at col {}", name, F, n_out, r, rows, d);
      }
      // A staged product reads only its own stage's image: after another product staged its x, or naming another x,
      // it is refused rather than reading whatever the scratch holds.
      auto refused = [&](const std::function<void()>& run) {
        try {
          run();
        } catch (const std::logic_error&) {
          return true;
        }
        return false;
      };
      const float* named = fs.norm ? das.as<float>() : din.as<float>();
      if (!refused([&] {
            fused(0, rows, nullptr, dy.as<float>());
            cuda::gemv_prompt(m, dx.as<float>(), rows, dy.as<float>());  // stages its own x over the shared image
            cuda::gemv_prompt(m, named, rows, dy.as<float>(), nullptr, true);
          }))
        return name + ": a staged product ran after another product had overwritten its stage";
      if (!refused([&] {
            fused(0, rows, nullptr, dy.as<float>());
            cuda::gemv_prompt(m, dx.as<float>(), rows, dy.as<float>(), nullptr, true);
          }))
        return name + ": a staged product naming another x ran on this stage";
      // The model's form: the residual stream added in place, one rounding, as after the storing kernel.
      const auto res = random_floats(size_t(rows * n_out), rng);
      std::vector<float> a(res.size()), b(res.size());
      cuda::copy_to_device(dy.p, res.data(), res.size() * 4);
      plain(dy.as<float>(), dy.as<float>());
      cuda::copy_to_host(a.data(), dy.p, a.size() * 4);
      cuda::copy_to_device(dy.p, res.data(), res.size() * 4);
      fused(0, rows, dy.as<float>(), dy.as<float>());
      cuda::copy_to_host(b.data(), dy.p, b.size() * 4);
      if (int64_t d = first_bit_difference(a.data(), b.data(), a.size()); d >= 0)
        return fmt::format("{}: {}x{} rows={}: the residual form differs at {}", name, F, n_out, rows, d);
    }
  }
  return {};
}

}  // namespace

std::string check_cuda_rmsnorm();
std::string check_cuda_swiglu();
std::string check_cuda_attention();
std::string check_cuda_attention_mma();
std::string check_cuda_attention_prompt();
std::string check_cuda_attention_prompt_keys();
std::string check_cuda_embedding(GgmlType type);
std::string check_cuda_rope_store();
std::string check_cuda_residual();
std::string check_cuda_gather();
std::string check_cuda_candidates();
std::string check_cuda_split_producers();
std::string check_cuda_prompt_stack();
std::string check_cuda_mma_group();

}  // namespace tf::contract

int main(int argc, char** argv) {
  using namespace tf;
  // Every registered CUDA kernel must have a check here; controls come from its record.
  std::map<std::string, std::function<std::string()>> checks = {
      {"rmsnorm", contract::check_cuda_rmsnorm},
      {"swiglu", contract::check_cuda_swiglu},
      {"attention", contract::check_cuda_attention},
      {"attention_mma", contract::check_cuda_attention_mma},
      {"attention_prompt", contract::check_cuda_attention_prompt},
      {"attention_prompt_keys", contract::check_cuda_attention_prompt_keys},
      {"rope_store", contract::check_cuda_rope_store},
      {"residual_add", contract::check_cuda_residual},
      {"gather_rows", contract::check_cuda_gather},
      {"split_producers", contract::check_cuda_split_producers},
      {"sample_candidates", contract::check_cuda_candidates}};
  for (auto [name, t] : {std::pair<const char*, GgmlType>{"mma.q4_0", GgmlType::Q4_0},
                         {"mma.q4_1", GgmlType::Q4_1},
                         {"mma.q8_0", GgmlType::Q8_0},
                         {"mma.q4_k", GgmlType::Q4_K},
                         {"mma.q6_k", GgmlType::Q6_K},
                         {"mma.bf16", GgmlType::BF16}})
    checks[name] = [t = t] {
      struct Keep {  // the mode as the environment set it, whatever the check does
        int mode = cuda::mma_wgmma_mode();
        ~Keep() { cuda::mma_set_wgmma(mode); }
      } keep;
      // The many-row cases alone on warpgroup mma first (where the device has it), so its own faults must show.
      cuda::mma_set_wgmma(1);
      const int64_t before = cuda::mma_wgmma_launches();
      std::string fault = contract::check_gemv(t, false, cuda::mma_split_rows() + 1);
      if (fault.empty() && cuda::mma_wgmma_device() && cuda::mma_wgmma_launches() == before)
        fault = "the many-row cases did not run on warpgroup mma";
      if (!fault.empty()) return fault + " (many rows on wgmma)";
      cuda::mma_set_wgmma(0);
      fault = contract::check_gemv(t, false);
      return fault.empty() ? fault : fault + " (many rows on the register kernel)";
    };
  for (auto [name, t] :
       {std::pair<const char*, GgmlType>{"prompt.q4_k", GgmlType::Q4_K}, {"prompt.q6_k", GgmlType::Q6_K}})
    checks[name] = [t = t] { return contract::check_prompt(t, false); };
  for (auto [name, t] :
       {std::pair<const char*, GgmlType>{"prompt_image.q4_k", GgmlType::Q4_K}, {"prompt_image.q6_k", GgmlType::Q6_K}})
    checks[name] = [t = t] { return contract::check_prompt(t, true, 128); };
  for (auto [name, t] : {std::pair<const char*, GgmlType>{"prompt_image_wide.q4_k", GgmlType::Q4_K},
                         {"prompt_image_wide.q6_k", GgmlType::Q6_K}})
    checks[name] = [t = t] {
      for (int width : {192, 224, 256})
        if (std::string fault = contract::check_prompt(t, true, width); !fault.empty()) return fault;
      return std::string();
    };
  checks["prompt_image_stack"] = contract::check_cuda_prompt_stack;
  checks["mma_group"] = contract::check_cuda_mma_group;
  checks["prompt_stage_swiglu"] = [] { return contract::check_prompt_fused_stage(GgmlType::Q6_K, {false, 0}); };
  checks["prompt_stage_swiglu_wide"] = [] { return contract::check_prompt_fused_stage(GgmlType::Q6_K, {false, 1}); };
  checks["prompt_stage_norm"] = [] { return contract::check_prompt_fused_stage(GgmlType::Q4_K, {true}); };
  for (auto [name, t] : {std::pair<const char*, GgmlType>{"gemv.f32", GgmlType::F32},
                         {"gemv.f16", GgmlType::F16},
                         {"gemv.bf16", GgmlType::BF16},
                         {"gemv.q4_0", GgmlType::Q4_0},
                         {"gemv.q4_1", GgmlType::Q4_1},
                         {"gemv.q8_0", GgmlType::Q8_0},
                         {"gemv.q4_k", GgmlType::Q4_K},
                         {"gemv.q6_k", GgmlType::Q6_K}})
    checks[name] = [t = t] { return contract::check_gemv(t, true); };
  for (auto [name, t] : {std::pair<const char*, GgmlType>{"embedding.q8_0", GgmlType::Q8_0},
                         {"embedding.q4_k", GgmlType::Q4_K},
                         {"embedding.q6_k", GgmlType::Q6_K},
                         {"embedding.bf16", GgmlType::BF16},
                         {"embedding.q4_1", GgmlType::Q4_1}})
    checks[name] = [t = t] { return contract::check_cuda_embedding(t); };
  int k = 0, pass = 0, controls = 0, caught = 0;
  // Record names on the command line run those records alone (a change's own checks); none runs every record.
  const std::set<std::string> only(argv + 1, argv + argc);
  for (const std::string& n : only)
    if (checks.find(n) == checks.end()) {
      std::printf("no CUDA kernel record named %s\n", n.c_str());
      return 2;
    }
  if (cuda::device_count() == 0) {  // after the names, so that a wrong one is refused on any machine
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  for (const KernelRecord& rec : cuda_kernel_records()) {
    if (!only.empty() && only.count(rec.name) == 0) continue;
    ++k;
    auto it = checks.find(rec.name);
    std::string why = it == checks.end() ? "no contract check registered" : it->second();
    std::printf("%-10s %s%s\n", rec.name.c_str(), why.empty() ? "pass" : "FAIL: ", why.c_str());
    pass += why.empty();
#if defined(TF_CTL) && TF_CTL
    for (const PlantedControl& c : rec.controls) {
      ++controls;
      g_active_control = c.id;
      std::string red = it == checks.end() ? "" : it->second();
      g_active_control = 0;
      std::printf("  control %d (%s): %s%s\n", c.id, c.what.c_str(),
                  red.empty() ? "NOT CAUGHT" : "caught: ", red.c_str());
      caught += !red.empty();
    }
#endif
  }
  std::printf("SUMMARY contract cuda: kernels=%d pass=%d fail=%d controls=%d caught=%d\n", k, pass, k - pass, controls,
              caught);
  return (pass == k && caught == controls) ? 0 : 1;
}
