// Contract checks of the CPU elementwise, norm, rope, attention and selection kernels.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "backend/cpu/ops.h"
#include "harness.h"
#include "quant/ggml/dequant.h"

namespace tf::contract {
namespace {

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

std::string check_rmsnorm() {
  std::mt19937 rng(7);
  for (int64_t n : {576, 64, 1}) {
    for (int64_t rows : {1, 3, 7}) {
      auto x = random_floats(size_t(rows * n), rng, 3.0f), w = random_floats(size_t(n), rng);
      auto y = with_canary(size_t(rows * n), 4);
      cpu::rmsnorm(x.data(), w.data(), rows, n, 1e-5f, y.data());
      if (!canary_intact(y, size_t(rows * n))) return fmt::format("write past the end at n={} rows={}", n, rows);
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < n; ++i) ss += double(x[size_t(r * n + i)]) * x[size_t(r * n + i)];
        double inv = 1.0 / std::sqrt(ss / double(n) + 1e-5);
        for (int64_t i = 0; i < n; ++i) {
          double ref = double(x[size_t(r * n + i)]) * inv * double(w[size_t(i)]);
          double got = y[size_t(r * n + i)];
          if (!(std::fabs(got - ref) <= 4 * kU * std::fabs(ref) + 0x1.0p-126))
            return fmt::format("n={} row {} [{}]: {} vs {}", n, r, i, got, ref);
        }
        auto alone = with_canary(size_t(n), 4);
        cpu::rmsnorm(x.data() + r * n, w.data(), 1, n, 1e-5f, alone.data());
        if (first_bit_difference(alone.data(), y.data() + r * n, size_t(n)) >= 0)
          return fmt::format("row {} differs when computed alone", r);
      }
    }
  }
  return {};
}

std::string check_rope() {
  std::mt19937 rng(8);
  const int64_t hd = 64, heads = 3;
  for (auto pairing : {cpu::RopePairing::Norm, cpu::RopePairing::Neox}) {
    for (int64_t n_rot : {64, 32}) {
      const std::vector<int64_t> pos = {0, 1, 17, 500, 4095, 8191};
      const int64_t rows = int64_t(pos.size()), half = n_rot / 2, stride = heads * hd;
      auto x = random_floats(size_t(rows * stride), rng);
      auto y = x;
      std::vector<float> c(size_t(rows * half)), s(size_t(rows * half));
      for (int64_t r = 0; r < rows; ++r)
        cpu::rope_angles(pos[size_t(r)], n_rot, 100000.0, 1.0, nullptr, c.data() + r * half, s.data() + r * half);
      cpu::rope(y.data(), rows, stride, heads, hd, n_rot, c.data(), s.data(), pairing);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t h = 0; h < heads; ++h) {
          const float* xv = x.data() + r * stride + h * hd;
          const float* yv = y.data() + r * stride + h * hd;
          for (int64_t i = 0; i < hd; ++i) {
            double ref = xv[i];
            double mag = std::fabs(xv[i]);
            if (i < n_rot) {
              int64_t k = pairing == cpu::RopePairing::Norm ? i / 2 : i % half;
              int64_t a = pairing == cpu::RopePairing::Norm ? 2 * k : k;
              int64_t b = pairing == cpu::RopePairing::Norm ? 2 * k + 1 : k + half;
              double th = double(pos[size_t(r)]) * std::pow(100000.0, -2.0 * double(k) / double(n_rot));
              ref = i == a ? xv[a] * std::cos(th) - xv[b] * std::sin(th) : xv[a] * std::sin(th) + xv[b] * std::cos(th);
              mag = std::fabs(xv[a]) + std::fabs(xv[b]);
            }
            if (!(std::fabs(yv[i] - ref) <= 8 * kU * mag))
              return fmt::format("pos {} head {} [{}] n_rot {}: {} vs {}", pos[size_t(r)], h, i, n_rot, yv[i], ref);
          }
        }
        auto alone = std::vector<float>(x.begin() + r * stride, x.begin() + (r + 1) * stride);
        cpu::rope(alone.data(), 1, stride, heads, hd, n_rot, c.data() + r * half, s.data() + r * half, pairing);
        if (first_bit_difference(alone.data(), y.data() + r * stride, size_t(stride)) >= 0)
          return fmt::format("row {} differs when computed alone", r);
      }
    }
  }
  return {};
}

std::string check_attention() {
  std::mt19937 rng(9);
  const int64_t hd = 64, nh = 9, nkv = 3, kvs = nkv * hd, cap = 320;
  auto k = random_floats(size_t(cap * kvs), rng), v = random_floats(size_t(cap * kvs), rng);
  const float scale = 0.125f;
  // Pages of 16 positions, listed out of memory order, so the check also covers the page indirection.
  const int64_t P = 16, n_pages = cap / P;
  std::vector<const float*> kp(static_cast<size_t>(n_pages)), vp(static_cast<size_t>(n_pages));
  for (int64_t i = 0; i < n_pages; ++i) {
    int64_t phys = (i * 7) % n_pages;
    kp[size_t(i)] = k.data() + phys * P * kvs;
    vp[size_t(i)] = v.data() + phys * P * kvs;
  }
  const cpu::KvView view{kp.data(), vp.data(), P, kvs};
  auto K = [&](int64_t j) { return view.k(j); };
  auto Vr = [&](int64_t j) { return view.v(j); };
  for (std::vector<int32_t> pos : {std::vector<int32_t>{0}, {5, 6}, {1, 40, 41, 42, 299}}) {
    const int64_t rows = int64_t(pos.size());
    auto q = random_floats(size_t(rows * nh * hd), rng);
    std::vector<float> out(size_t(rows * nh * hd));
    cpu::attention(q.data(), rows, pos.data(), view, nh, nkv, hd, scale, out.data(), pool());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t g = h / (nh / nkv), nk = pos[size_t(r)] + 1;
        const AttnRef ref_head = attention_reference(
            q.data() + (r * nh + h) * hd, hd, nk, scale, [&](int64_t j) { return K(j) + g * hd; },
            [&](int64_t j) { return Vr(j) + g * hd; });
        for (int64_t i = 0; i < hd; ++i) {
          const double ref = ref_head.out[size_t(i)], bound = ref_head.bound[size_t(i)];
          double got = out[size_t((r * nh + h) * hd + i)];
          if (!(std::fabs(got - ref) <= bound))
            return fmt::format("pos {} head {} [{}]: {} vs {} (bound {:.3g})", pos[size_t(r)], h, i, got, ref, bound);
        }
      }
      std::vector<float> alone(size_t(nh * hd));
      cpu::attention(q.data() + r * nh * hd, 1, &pos[size_t(r)], view, nh, nkv, hd, scale, alone.data(), pool());
      if (first_bit_difference(alone.data(), out.data() + r * nh * hd, alone.size()) >= 0)
        return fmt::format("row at pos {} differs when computed alone", pos[size_t(r)]);
    }
  }
  return {};
}

std::string check_swiglu() {
  std::mt19937 rng(10);
  for (int64_t n : {1536, 7}) {
    auto g = random_floats(size_t(n), rng, 8.0f), u = random_floats(size_t(n), rng);
    std::vector<float> y(static_cast<size_t>(n));
    cpu::swiglu(g.data(), u.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      double ref = double(g[size_t(i)]) / (1.0 + std::exp(-double(g[size_t(i)]))) * u[size_t(i)];
      if (!(std::fabs(y[size_t(i)] - ref) <= 4 * kU * std::fabs(ref) + 0x1.0p-140))
        return fmt::format("n={} [{}]: {} vs {}", n, i, y[size_t(i)], ref);
    }
  }
  return {};
}

std::string check_embedding() {
  std::mt19937 rng(11);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0,
                     GgmlType::Q4_K, GgmlType::Q6_K}) {
    const int64_t n_in = 256, vocab = 300;
    auto wb = random_weight(t, n_in, vocab, rng);
    cpu::WeightView w{"emb", t, n_in, vocab, wb.data(), int64_t(wb.size()) / vocab};
    std::vector<int32_t> ids = {0, 299, 17, 17, 150};
    std::vector<float> out(ids.size() * size_t(n_in)), ref(static_cast<size_t>(n_in));
    cpu::embedding(w, ids.data(), int64_t(ids.size()), out.data());
    for (size_t r = 0; r < ids.size(); ++r) {
      quant::dequantize(t, wb.data() + ids[r] * w.row_bytes, ref.data(), n_in);
      if (int64_t d = first_bit_difference(ref.data(), out.data() + r * size_t(n_in), size_t(n_in)); d >= 0)
        return fmt::format("{} id {} element {} differs from the exact decode", ggml_type_name(t), ids[r], d);
    }
  }
  return {};
}

std::vector<float> tied_logits(std::mt19937& rng, int64_t n) {
  std::vector<float> l(static_cast<size_t>(n));
  std::uniform_int_distribution<int> v(-40, 40);
  for (auto& x : l) x = float(v(rng)) * 0.25f;  // many exact ties
  return l;
}

std::string check_argmax() {
  std::mt19937 rng(12);
  std::vector<float> one(100, 0.0f);
  one[1] = 5.0f;
  if (cpu::argmax(one.data(), 100) != 1) return "a single maximum at id 1 is missed";
  for (int rep = 0; rep < 20; ++rep) {
    auto l = tied_logits(rng, 49152);
    int64_t best = 0;
    for (int64_t i = 1; i < int64_t(l.size()); ++i)
      if (l[size_t(i)] > l[size_t(best)]) best = i;
    if (cpu::argmax(l.data(), int64_t(l.size())) != best) return fmt::format("rep {}: not the lowest tied id", rep);
  }
  return {};
}

std::string check_topk() {
  std::mt19937 rng(13);
  std::vector<float> last(100, 0.0f);
  last[99] = 5.0f;
  if (cpu::topk(last.data(), 100, 3).front() != 99) return "a maximum at the last id is missed";
  for (int64_t k : {1, 5, 64, 2000}) {
    auto l = tied_logits(rng, 49152);
    std::vector<int32_t> ref(l.size());
    std::iota(ref.begin(), ref.end(), 0);
    std::stable_sort(ref.begin(), ref.end(), [&](int32_t a, int32_t b) { return l[size_t(a)] > l[size_t(b)]; });
    ref.resize(size_t(k));
    if (cpu::topk(l.data(), int64_t(l.size()), k) != ref) return fmt::format("k={}: order differs", k);
  }
  return {};
}

std::string check_softmax() {
  std::mt19937 rng(14);
  for (int64_t n : {49152, 5}) {
    auto l = random_floats(size_t(n), rng, 4.0f);
    if (n == 5) l[2] += 1000.0f;  // large logits must not overflow
    std::vector<double> p(static_cast<size_t>(n));
    cpu::softmax(l.data(), n, p.data());
    double mx = *std::max_element(l.begin(), l.end()), sum = 0;
    for (auto x : l) sum += std::exp(double(x) - mx);
    for (int64_t i = 0; i < n; ++i) {
      double ref = std::exp(double(l[size_t(i)]) - mx) / sum;
      if (!(std::fabs(p[size_t(i)] - ref) <= 2.0 * double(n) * 0x1.0p-52 * ref + 1e-300))
        return fmt::format("n={} [{}]: {} vs {}", n, i, p[size_t(i)], ref);
    }
  }
  return {};
}

const bool kRegistered = add_check("rmsnorm", check_rmsnorm) && add_check("rope", check_rope) &&
                         add_check("attention", check_attention) && add_check("swiglu", check_swiglu) &&
                         add_check("embedding", check_embedding) && add_check("argmax", check_argmax) &&
                         add_check("topk", check_topk) && add_check("softmax", check_softmax);

}  // namespace
}  // namespace tf::contract
