// Stacked prompt images (Q|K|V in one wide product): each column bit-equal to its own matrix's decoding product.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/ctl.h"
#include "backend/cuda/cuda_gemv.h"
#include "backend/cuda/cuda_mma.h"
#include "base/scalar.h"
#include "cuda_buf.h"
#include "harness.h"

namespace tf::contract {
std::vector<float> prompt_plain(const cuda::DeviceMatrix& m, const float* dx, int64_t rows);
namespace {

std::string refusals(const cuda::DeviceMatrix& s, const std::vector<cuda::DeviceMatrix>& ms, void* img);

struct StackCase {
  int64_t n_in;
  std::vector<GgmlType> types;
  std::vector<int64_t> n_out;
  int width;  // forced, or -1 for the rule
  std::vector<int64_t> rows;
};

std::string check_case(const StackCase& c, std::mt19937& rng) {
  const std::string name = fmt::format("stack {}x{}", c.n_in, fmt::join(c.n_out, "|"));
  const int before = cuda::set_prompt_image_width(c.width);
  struct Keep {
    int before;
    ~Keep() { cuda::set_prompt_image_width(before); }
  } keep{before};
  std::vector<std::vector<uint8_t>> wb;
  std::deque<Mem> dw;
  std::vector<cuda::DeviceMatrix> ms;
  for (size_t i = 0; i < c.types.size(); ++i) {
    wb.push_back(random_weight(c.types[i], c.n_in, c.n_out[i], rng));
    if (i == 1)  // the second matrix 8x larger, so that its power of two is not its neighbours'
      for (size_t b = 0; b < wb[i].size(); b += 144)
        for (size_t at : {b, b + 2}) {
          const float v = f16_to_f32(uint16_t(wb[i][at] | (wb[i][at + 1] << 8))) * 8.0f;
          const uint16_t h = f32_to_f16(v);
          wb[i][at] = uint8_t(h), wb[i][at + 1] = uint8_t(h >> 8);
        }
    dw.emplace_back(cuda::device_matrix_bytes(c.types[i], c.n_in, c.n_out[i]));
    ms.push_back(cuda::upload_matrix(c.types[i], wb[i].data(), c.n_in, c.n_out[i], dw.back().p));
    if (!cuda::gemv_prompt_takes(ms.back())) return cuda::mma_wgmma_device() ? name + ": no prompt product" : "";
  }
  if (ms[0].f16_exp == ms[1].f16_exp) return name + ": the case meant its matrices to differ in power of two";
  std::vector<const cuda::DeviceMatrix*> ptrs;
  int64_t total = 0;
  for (const auto& m : ms) ptrs.push_back(&m), total += m.n_out;
  const size_t bytes = cuda::prompt_image_stack_bytes(ptrs);
  if (bytes == 0) return name + ": not stacked";
  Mem img(bytes + 256);
  std::vector<uint8_t> tail(256, 0x5A), back(256);
  cuda::copy_to_device(static_cast<uint8_t*>(img.p) + bytes, tail.data(), tail.size());
  const cuda::DeviceMatrix s = cuda::prompt_image_stack(ptrs, img.p);
  cuda::copy_to_host(back.data(), static_cast<uint8_t*>(img.p) + bytes, back.size());
  if (back != tail) return name + ": the stack's builder wrote past its end";
  if (s.n_out != total || (c.width > 0 && s.f16_tile != c.width))
    return fmt::format("{}: {} outputs in blocks of {}", name, s.n_out, s.f16_tile);
  for (int64_t rows : c.rows) {
    auto x = random_floats(size_t(rows * c.n_in), rng);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < c.n_in; ++i) x[size_t(r * c.n_in + i)] *= std::ldexp(1.0f, int(r % 3) * 7 - 7);
    if (rows >= 3) x[size_t(c.n_in + 5)] = NAN;
    Mem dx(x.size() * 4), dy(size_t(rows * total + 64) * 4), d1(size_t(total) * 4);
    cuda::copy_to_device(dx.p, x.data(), x.size() * 4);
    auto y = with_canary(size_t(rows * total), 64);
    cuda::copy_to_device(dy.p, y.data(), y.size() * 4);
    cuda::gemv_prompt(s, dx.f(), rows, dy.f());
    y = to_host(dy.p, y.size());
    if (!canary_intact(y, size_t(rows * total))) return name + ": write past the output";
    int64_t first = 0;
    for (const auto& m : ms) {  // each matrix's columns of the stack against its own decoding product
      const std::vector<float> want = prompt_plain(m, dx.f(), rows);
      for (int64_t r = 0; r < rows; ++r)
        if (int64_t d = first_bit_difference(want.data() + r * m.n_out, y.data() + r * total + first, size_t(m.n_out));
            d >= 0)
          return fmt::format("{}: rows={} row {} output {} differs from its matrix's product", name, rows, r,
                             first + d);
      first += m.n_out;
    }
    const int64_t step = rows > 8 ? 37 : 1;
    for (int64_t r = 0; r < rows; r += step) {
      cuda::gemv_prompt(s, dx.f() + r * c.n_in, 1, d1.f());
      if (int64_t d = first_bit_difference(to_host(d1.p, size_t(total)).data(), y.data() + r * total, size_t(total));
          d >= 0)
        return fmt::format("{}: row {} of {} differs from the row alone at {}", name, r, rows, d);
    }
    cuda::gemv_prompt_stage(ms[0], dx.f(), rows);  // x staged once for the stack, as the model's Q|K|V reads it
    cuda::gemv_prompt(s, dx.f(), rows, dy.f(), nullptr, true);
    if (int64_t d = first_bit_difference(to_host(dy.p, size_t(rows * total)).data(), y.data(), size_t(rows * total));
        d >= 0)
      return fmt::format("{}: rows={}: the staged product differs at {}", name, rows, d);
    const auto res = random_floats(size_t(rows * total), rng);
    cuda::copy_to_device(dy.p, res.data(), res.size() * 4);
    cuda::gemv_prompt(s, dx.f(), rows, dy.f(), dy.f());
    const std::vector<float> fused = to_host(dy.p, res.size());
    for (size_t i = 0; i < res.size(); ++i) {
      const float want = res[i] + y[i];
      if (std::memcmp(&want, &fused[i], 4) != 0 && !(std::isnan(want) && std::isnan(fused[i])))
        return fmt::format("{}: residual form differs at {}", name, i);
    }
  }
  return refusals(s, ms, img.p);
}

// Whether fn throws a logic_error naming `why`.
bool refused(const std::function<void()>& fn, const char* why) {
  try {
    fn();
  } catch (const std::logic_error& e) {
    return std::string(e.what()).find(why) != std::string::npos;
  }
  return false;
}

// What may not stack is not stacked, and a stacked matrix is read by its wide prompt product alone.
std::string refusals(const cuda::DeviceMatrix& s, const std::vector<cuda::DeviceMatrix>& ms, void* img) {
  Mem dx(size_t(s.n_in) * 4), dy(size_t(s.n_out) * 4);
  cuda::DeviceMatrix bare = s, odd = ms[0], other_n = ms[1];
  bare.f16w = nullptr;
  odd.n_out -= 8, other_n.n_in /= 2, other_n.units /= 2;  // a join inside a 16-output tile; another row length
  using V = std::vector<const cuda::DeviceMatrix*>;
  for (const V& v :
       {V{}, V{&ms[0]}, V{&ms[0], &ms[1], &ms[0], &ms[1]}, V{&odd, &ms[1]}, V{&ms[0], &other_n}, V{&s, &ms[0]}})
    if (cuda::prompt_image_stack_bytes(v) != 0 || !refused([&] { cuda::prompt_image_stack(v, img); }, "do not stack"))
      return fmt::format("a stack of {} matrices that may not stack was built", v.size());
  {
    const int before = cuda::set_prompt_image_width(128);  // narrow stacks would need the old kernel's exponents
    const size_t narrow = cuda::prompt_image_stack_bytes(V{&ms[0], &ms[1]});
    cuda::set_prompt_image_width(before);
    if (narrow != 0) return "a stack in blocks of 128 outputs was sized";
  }
  if (!refused([&] { cuda::gemv_prompt(bare, dx.f(), 1, dy.f()); }, "read from its wide image only"))
    return "a stacked matrix without its image was run";
  if (!refused([&] { cuda::gemv(s, dx.f(), 1, dy.f()); }, "read by gemv_prompt from its image only"))
    return "a stacked matrix was run by gemv";
  cuda::DeviceMatrix again = s;
  if (!refused([&] { cuda::prompt_image_build(again, img); }, "no weights of its own"))
    return "a stacked matrix's image was rebuilt from its weights";
  if (!refused([&] { cuda::prefetch_weights(s, 1.0, 1 << 20); }, "no weights of its own"))
    return "a stacked matrix's weights were pulled";
  return {};
}

}  // namespace

// The decoding prompt product (no image), with no planted control: the bits every prompt image must give.
std::vector<float> prompt_plain(const cuda::DeviceMatrix& m, const float* dx, int64_t rows) {
#if defined(TF_CTL) && TF_CTL
  struct Off {  // the control stays planted in the checked product only
    int ctl = g_active_control;
    Off() { g_active_control = 0; }
    ~Off() { g_active_control = ctl; }
  } off;
#endif
  cuda::DeviceMatrix plain = m;
  plain.f16w = nullptr;
  Mem d(size_t(rows * m.n_out) * 4);
  cuda::gemv_prompt(plain, dx, rows, d.f());
  return to_host(d.p, size_t(rows * m.n_out));
}

std::string check_cuda_prompt_stack() {
  std::mt19937 rng(2468);
  const GgmlType k4 = GgmlType::Q4_K, k6 = GgmlType::Q6_K;
  const std::vector<StackCase> cases = {
      {768, {k4, k4, k6}, {1536, 256, 256}, 192, {1, 2, 3, 7, 130, 300}},  // blocks across both joins
      {256, {k4, k4, k6}, {96, 48, 40}, 256, {1, 3, 130}},                 // one block, partial
      {512, {k6, k4}, {320, 200}, 224, {1, 3, 130}},                       // two matrices
      {4096, {k4, k4, k6}, {4096, 1024, 1024}, -1, {1, 130}},              // the 8B Q|K|V by the rule
  };
  for (const StackCase& c : cases)
    if (std::string why = check_case(c, rng); !why.empty()) return why;
  return {};
}

}  // namespace tf::contract
