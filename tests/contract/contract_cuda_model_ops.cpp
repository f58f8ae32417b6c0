// CUDA embedding, KV store (alone and fused with RoPE), residual adds, row gather, the split producers and the
// sampler's candidates, against exact or float64 references, with row invariance.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <deque>
#include <limits>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_gemv.h"
#include "backend/cuda/cuda_mma.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_sample.h"
#include "cuda_buf.h"
#include "harness.h"
#include "quant/ggml/dequant.h"

namespace tf::contract {
namespace {

// The keyed draw of specs/exactness.md, written here from the spec as the reference.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
double gumbel_ref(uint64_t seed, int64_t pos, int32_t v) {
  uint64_t h = mix(seed + 0x9E3779B97F4A7C15ull);
  h = mix(h ^ (uint64_t(pos) * 0xD1B54A32D192ED03ull));
  h = mix(h ^ (uint64_t(uint32_t(v)) * 0x8CB92BA72F3D8DD7ull));
  return -std::log(-std::log((double(h >> 11) + 0.5) * 0x1.0p-53));
}

// Products of three formats reading one staged image (gemv_stage), two of them on the side stream, equal each product
// staging its own; a staged product after another product (which may overwrite the image) is refused.
std::string check_staged_products(std::mt19937& rng) {
  const int64_t E = 512, rows = cuda::gemv_split_rows() + 8;
  const GgmlType types[3] = {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0};
  const int64_t outs[3] = {256, 64, 128};
  std::deque<Buf<uint8_t>> dw;  // Buf neither copies nor moves
  std::vector<cuda::DeviceMatrix> m;
  for (int i = 0; i < 3; ++i) {
    const auto w = random_weight(types[i], E, outs[i], rng);
    dw.emplace_back(std::vector<uint8_t>(cuda::device_matrix_bytes(types[i], E, outs[i])));
    m.push_back(cuda::upload_matrix(types[i], w.data(), E, outs[i], dw.back().p));
  }
  Buf<float> x(random_floats(size_t(rows * E), rng)), wn(random_floats(size_t(E), rng));
  Buf<float> h(std::vector<float>(size_t(rows * E))), xs(std::vector<float>(size_t(rows * E))),
      xsum(std::vector<float>(size_t(rows * E / 32)));
  cuda::rmsnorm(x.p, wn.p, rows, E, 1e-5f, h.p, xs.p, xsum.p);
  const cuda::SplitX pre{xs.p, xsum.p};
  std::deque<Buf<float>> alone, staged;  // staged starts as NaN, so a product that writes nothing differs
  for (int i = 0; i < 3; ++i) {
    alone.emplace_back(std::vector<float>(size_t(rows * outs[i]), 1.0f));
    staged.emplace_back(std::vector<float>(size_t(rows * outs[i]), std::nanf("")));
    cuda::gemv(m[size_t(i)], h.p, rows, alone.back().p, nullptr, pre);
  }
  cuda::SplitX st = pre;
  st.staged = true;
  auto refused = [&](int i) {
    try {
      cuda::gemv(m[size_t(i)], h.p, rows, staged[size_t(i)].p, nullptr, st);
    } catch (const std::logic_error&) {
      return true;
    }
    return false;
  };
  if (cuda::gemv_stage(m[0], cuda::gemv_split_rows(), pre)) return "a few-row product was staged";
  if (!cuda::gemv_stage(m[0], rows, pre)) {
    if (cuda::mma_wgmma_device() && cuda::mma_wgmma_mode() != 0) return "many rows were not staged";
    return refused(1) ? "" : "a staged product without warpgroup mma was not refused";
  }
  const int64_t launches = cuda::mma_wgmma_launches();
  cuda::side_fork();
  {
    cuda::SideLaunches side;
    cuda::gemv(m[1], h.p, rows, staged[1].p, nullptr, st);
    cuda::gemv(m[2], h.p, rows, staged[2].p, nullptr, st);
  }
  cuda::gemv(m[0], h.p, rows, staged[0].p, nullptr, st);
  if (!cuda::side_join()) return "side_join failed";
  if (cuda::mma_wgmma_launches() != launches + 3) return "the staged products did not all run on warpgroup mma";
  for (int i = 0; i < 3; ++i)
    if (int64_t d =
            first_bit_difference(alone[size_t(i)].get().data(), staged[size_t(i)].get().data(), size_t(rows * outs[i]));
        d >= 0)
      return fmt::format("{}: the staged product differs at {}", ggml_type_name(types[i]), d);
  if (refused(1)) return "a staged product after staged ones was refused";
  cuda::gemv(m[0], h.p, rows, staged[0].p, nullptr, pre);  // stages its own image over the shared one
  return refused(2) ? "" : "a staged product after an unstaged one was not refused";
}

}  // namespace

std::string check_cuda_embedding(GgmlType type) {
  std::mt19937 rng(77 + uint32_t(type));
  const int64_t n_embd = 512, n_vocab = 300;
  auto wb = random_weight(type, n_embd, n_vocab, rng);
  const int64_t row_bytes = int64_t(wb.size()) / n_vocab;
  Buf<uint8_t> dw(std::vector<uint8_t>(cuda::device_matrix_bytes(type, n_embd, n_vocab, true)));
  const cuda::DeviceMatrix m = cuda::upload_matrix(type, wb.data(), n_embd, n_vocab, dw.p, true);
  for (int64_t rows : {1, 2, 3, 7, 16, 64}) {
    std::vector<int32_t> ids(static_cast<size_t>(rows));
    for (auto& id : ids) id = int32_t(rng() % uint32_t(n_vocab - 1));
    ids[0] = int32_t(n_vocab - 2);
    Buf<int32_t> did(ids);
    Buf<float> dout(with_canary(size_t(rows * n_embd), 8));
    cuda::embedding(m, did.p, rows, dout.p);
    auto out = dout.get();
    if (!canary_intact(out, size_t(rows * n_embd))) return fmt::format("rows={}: write past the end", rows);
    std::vector<float> ref(static_cast<size_t>(n_embd));
    for (int64_t r = 0; r < rows; ++r) {
      quant::dequantize(type, wb.data() + ids[size_t(r)] * row_bytes, ref.data(), n_embd);
      if (int64_t d = first_bit_difference(ref.data(), out.data() + r * n_embd, size_t(n_embd)); d >= 0)
        return fmt::format("rows={} row {} token {} [{}]: {} vs exact decode {}", rows, r, ids[size_t(r)], d,
                           out[size_t(r * n_embd + d)], ref[size_t(d)]);
    }
  }
  return {};
}

// Q rotated in place, K rotated and V copied into the page slot, K and V given as rows or as slice partials: every
// float against a host reference in the kernels' own single-rounding float steps, so the comparison is bitwise.
std::string check_cuda_rope_store() {
  std::mt19937 rng(94);
  const int64_t n_head = 4, n_kvh = 2, P = 8, n_pages = 12, max_pages = 4;
  const std::vector<int32_t> table = {5, 2, 9, 0, 7, 11, 3, 1};
  // Heads of 64 and 128: the row form's two instantiations.
  for (int64_t hd : {64, 128}) {
    const int64_t kvr = n_kvh * hd, qs = n_head * hd + 2 * kvr, layer_offset = 2 * P * kvr, page_floats = 4 * P * kvr;
    for (bool neox : {false, true})
      for (int64_t n_rot : {hd, hd / 2})
        for (int slices : {0, 5})
          for (int64_t rows : {1, 3, 7, 16, 32}) {  // 16 and 32: many rows, the row form where it applies
            const int64_t half = n_rot / 2;
            std::vector<int32_t> pos(static_cast<size_t>(rows)), seq(static_cast<size_t>(rows));
            for (int64_t r = 0; r < rows; ++r)
              seq[size_t(r)] = int32_t(r % 2), pos[size_t(r)] = int32_t((r * 13 + 5) % (P * max_pages));
            std::vector<float> cs(static_cast<size_t>(rows * half)), sn(static_cast<size_t>(rows * half));
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t i = 0; i < half; ++i) {
                const double th = pos[size_t(r)] * std::pow(10000.0, -2.0 * double(i) / double(n_rot));
                cs[size_t(r * half + i)] = float(std::cos(th)), sn[size_t(r * half + i)] = float(std::sin(th));
              }
            // Q|K|V rows as the stacked product writes them; with slices, K and V come from partials instead.
            auto qkv = random_floats(size_t(rows * qs), rng, 3.0f);
            auto kpart = random_floats(size_t(std::max(slices, 1) * rows * kvr), rng, 3.0f);
            auto vpart = random_floats(kpart.size(), rng, 3.0f);
            auto in = [&](bool v, int64_t r, int64_t j) {
              if (slices == 0) return qkv[size_t(r * qs + n_head * hd + (v ? kvr : 0) + j)];
              const auto& pp = v ? vpart : kpart;
              float s = pp[size_t(r * kvr + j)];
              for (int k = 1; k < slices; ++k) s = s + pp[size_t((k * rows + r) * kvr + j)];
              return s;
            };
            auto rot = [&](float x0, float x1, int64_t at, float& y0, float& y1) {
              const float c = cs[size_t(at)], s = sn[size_t(at)];
              const float a = x0 * c, b = x1 * s, e = x0 * s, f = x1 * c;
              y0 = a - b, y1 = e + f;
            };
            auto q_want = qkv;
            std::vector<float> pool(size_t(n_pages * page_floats), 0.0f), pool_want = pool;
            for (int64_t r = 0; r < rows; ++r) {
              const int64_t p = pos[size_t(r)], page = table[size_t(seq[size_t(r)] * max_pages + p / P)];
              float* kp = pool_want.data() + page * page_floats + layer_offset + (p % P) * kvr;
              for (int64_t j = 0; j < kvr; ++j) kp[j] = in(false, r, j), kp[P * kvr + j] = in(true, r, j);
              for (int64_t h = 0; h < n_head + n_kvh; ++h)
                for (int64_t i = 0; i < half; ++i) {
                  const int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
                  float* x = h < n_head ? q_want.data() + r * qs + h * hd : kp + (h - n_head) * hd;
                  rot(x[a], x[b], r * half + i, x[a], x[b]);
                }
            }
            Buf<float> dq(qkv), dk(kpart), dv(vpart), dpool(pool), dc(cs), ds(sn);
            Buf<int32_t> dpos(pos), dseq(seq), dtab(table);
            const cuda::KvSource ks =
                slices ? cuda::KvSource{dk.p, slices, kvr} : cuda::KvSource{dq.p + n_head * hd, 0, qs};
            const cuda::KvSource vs =
                slices ? cuda::KvSource{dv.p, slices, kvr} : cuda::KvSource{dq.p + n_head * hd + kvr, 0, qs};
            const int64_t row_form = cuda::rope_store_row_launches();
            cuda::rope_store(dq.p, qs, n_head, ks, vs, rows, hd, n_rot, dc.p, ds.p, neox, dpos.p, dseq.p, dtab.p,
                             max_pages, dpool.p, page_floats, layer_offset, P, kvr);
            const auto q_got = dq.get(), pool_got = dpool.get();
            const std::string at =
                fmt::format("hd={} neox={} n_rot={} slices={} rows={}", hd, neox, n_rot, slices, rows);
            if ((cuda::rope_store_row_launches() > row_form) != (rows >= 16 && n_rot == hd && slices == 0))
              return at + ": the row form ran where it should not, or not where it should";
            if (int64_t d = first_bit_difference(q_want.data(), q_got.data(), q_want.size()); d >= 0)
              return fmt::format("{}: Q differs at {}: {} vs {}", at, d, q_got[size_t(d)], q_want[size_t(d)]);
            if (int64_t d = first_bit_difference(pool_want.data(), pool_got.data(), pool_want.size()); d >= 0)
              return fmt::format("{}: the pool differs at {}: {} vs {}", at, d, pool_got[size_t(d)],
                                 pool_want[size_t(d)]);
          }
  }
  // Real K (Q4_K) and V (Q6_K) products leaving their partials in caller buffers equal the reduced rows.
  const int64_t hd = 64, kvr = n_kvh * hd, layer_offset = 2 * P * kvr, page_floats = 4 * P * kvr, E = 768;
  auto wk = random_weight(GgmlType::Q4_K, E, kvr, rng), wv = random_weight(GgmlType::Q6_K, E, kvr, rng);
  Buf<uint8_t> dwk(std::vector<uint8_t>(cuda::device_matrix_bytes(GgmlType::Q4_K, E, kvr)));
  Buf<uint8_t> dwv(std::vector<uint8_t>(cuda::device_matrix_bytes(GgmlType::Q6_K, E, kvr)));
  const cuda::DeviceMatrix mk = cuda::upload_matrix(GgmlType::Q4_K, wk.data(), E, kvr, dwk.p);
  const cuda::DeviceMatrix mv = cuda::upload_matrix(GgmlType::Q6_K, wv.data(), E, kvr, dwv.p);
  for (int64_t rows : {1, 7}) {
    const int64_t half = hd / 2;
    std::vector<int32_t> pos(static_cast<size_t>(rows)), seq(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) seq[size_t(r)] = int32_t(r % 2), pos[size_t(r)] = int32_t(3 * r + 1);
    Buf<float> dx(random_floats(size_t(rows * E), rng)), dc(random_floats(size_t(rows * half), rng));
    Buf<float> ds(random_floats(size_t(rows * half), rng)), dk(std::vector<float>(size_t(rows * kvr)));
    Buf<float> dv(std::vector<float>(size_t(rows * kvr)));
    const std::vector<float> nan(size_t(cuda::gemv_partial_floats(mk, rows)), std::nanf(""));
    Buf<float> kb(nan), vb(nan);
    Buf<int32_t> dpos(pos), dseq(seq), dtab(table);
    const auto q0 = random_floats(size_t(rows * n_head * hd), rng);
    std::vector<std::vector<float>> q_got, pool_got;
    for (bool partials : {false, true}) {
      Buf<float> dq(q0), dpool(std::vector<float>(size_t(n_pages * page_floats), 0.0f));
      cuda::KvSource ks{dk.p, 0, kvr}, vs{dv.p, 0, kvr};
      if (partials) {
        const cuda::Partials kp = cuda::gemv_partials(mk, dx.p, rows, dk.p, {}, kb.p);
        const cuda::Partials vp = cuda::gemv_partials(mv, dx.p, rows, dv.p, {}, vb.p);
        if (kp.p != kb.p || vp.p != vb.p) return fmt::format("rows={}: K or V partials not in the given buffer", rows);
        ks = {kp.p, kp.slices, kvr}, vs = {vp.p, vp.slices, kvr};
      } else {
        cuda::gemv(mk, dx.p, rows, dk.p);
        cuda::gemv(mv, dx.p, rows, dv.p);
      }
      cuda::rope_store(dq.p, n_head * hd, n_head, ks, vs, rows, hd, hd, dc.p, ds.p, false, dpos.p, dseq.p, dtab.p,
                       max_pages, dpool.p, page_floats, layer_offset, P, kvr);
      q_got.push_back(dq.get()), pool_got.push_back(dpool.get());
    }
    if (first_bit_difference(q_got[0].data(), q_got[1].data(), q_got[0].size()) >= 0 ||
        first_bit_difference(pool_got[0].data(), pool_got[1].data(), pool_got[0].size()) >= 0)
      return fmt::format("rows={}: rope_store from the products' partials differs from their reduced rows", rows);
  }
  return {};
}

std::string check_cuda_residual() {
  std::mt19937 rng(92);
  for (int64_t rows : {1, 3, 7}) {
    const int64_t n = 576;
    auto x = random_floats(size_t(rows * n), rng), y = random_floats(size_t(rows * n), rng),
         b = random_floats(size_t(n), rng);
    Buf<float> dx(x), dy(y), db(b);
    cuda::add_bias(dx.p, db.p, rows, n);
    cuda::add_inplace(dx.p, dy.p, rows * n);
    auto got = dx.get();
    for (int64_t i = 0; i < rows * n; ++i) {
      const float want = (x[size_t(i)] + b[size_t(i % n)]) + y[size_t(i)];  // each sum rounded once, in this order
      if (std::memcmp(&want, &got[size_t(i)], 4) != 0)
        return fmt::format("rows={} [{}]: {} vs {}", rows, i, got[size_t(i)], want);
    }
  }
  return {};
}

std::string check_cuda_gather() {
  std::mt19937 rng(93);
  const int64_t n = 320, src_rows = 10;
  auto src = random_floats(size_t(src_rows * n), rng);
  Buf<float> dsrc(src);
  for (std::vector<int32_t> idx : {std::vector<int32_t>{8}, {0, 4, 8}, {1, 2, 3, 5, 6, 7, 8}}) {
    Buf<int32_t> didx(idx);
    Buf<float> dout(with_canary(idx.size() * size_t(n), 4));
    cuda::gather_rows(dsrc.p, didx.p, int64_t(idx.size()), n, dout.p);
    auto out = dout.get();
    if (!canary_intact(out, idx.size() * size_t(n))) return "write past the end";
    for (size_t r = 0; r < idx.size(); ++r)
      if (first_bit_difference(out.data() + r * n, src.data() + idx[r] * n, size_t(n)) >= 0)
        return fmt::format("row {} is not source row {}", r, idx[r]);
  }
  return {};
}

namespace {

// The bytes a row's call wrote: its fields and its n candidates (an argmax row's arrays are left as they were).
bool same_row(const cuda::RowCandidatesDev& a, const cuda::RowCandidatesDev& b) {
  return std::memcmp(&a, &b, offsetof(cuda::RowCandidatesDev, logit)) == 0 &&
         std::memcmp(a.logit, b.logit, size_t(a.n) * sizeof(float)) == 0 &&
         std::memcmp(a.id, b.id, size_t(a.n) * sizeof(int32_t)) == 0;
}

// Rows asking for no candidates (greedy without logprobs) mixed with rows asking for them: the argmax rows give the
// reference argmax and the NaN flag alone, and the other rows the bytes they gave in a call of candidate rows only.
std::string check_argmax_rows(int64_t V, std::vector<float> l, int64_t rows, const std::vector<cuda::SampleRow>& sp,
                              const std::vector<cuda::RowCandidatesDev>& full) {
  // NaNs of both signs (a negative one sorts below every candidate's key): candidate row 5 holds one of each, argmax
  // rows 0 and 6 a negative one mid-row and a positive one in the first chunk.
  const float nan = std::numeric_limits<float>::quiet_NaN(), neg_nan = std::copysign(nan, -1.0f);
  l[size_t(5 * V + V - 2)] = neg_nan, l[size_t(5 * V + 7)] = nan;
  l[size_t(0 * V + V / 2)] = neg_nan, l[size_t(6 * V + 1)] = nan;
  std::vector<cuda::SampleRow> mixed = sp;
  for (int64_t r = 0; r < rows; r += 2) mixed[size_t(r)] = {0.0, 0, 0, 0};
  Buf<float> dl(l);
  Buf<cuda::SampleRow> dsp(mixed);
  Buf<cuda::RowCandidatesDev> dout(std::vector<cuda::RowCandidatesDev>(size_t(rows + 1)));
  Buf<char> scratch(std::vector<char>(cuda::candidates_scratch_bytes(rows, V)));
  cuda::candidates(dl.p, rows, V, dsp.p, dout.p, scratch.p);
  const auto out = dout.get();
  for (int64_t r = 0; r < rows; ++r) {
    const cuda::RowCandidatesDev& o = out[size_t(r)];
    const bool nan_row = r == 0 || r == 5 || r == 6;
    if (o.nan != (nan_row ? 1 : 0)) return fmt::format("V={} row {}: NaN flag {} in the mixed call", V, r, o.nan);
    if (r % 2 == 0) {
      int32_t best = -1;  // the first of the largest non-NaN logits
      for (int32_t v = 0; v < int32_t(V); ++v)
        if (!std::isnan(l[size_t(r * V + v)]) && (best < 0 || l[size_t(r * V + v)] > l[size_t(r * V + best)])) best = v;
      if (o.greedy != best || o.gumbel != best || o.n != 0)
        return fmt::format("V={} argmax row {}: greedy {} gumbel {} n {}, expected {}", V, r, o.greedy, o.gumbel, o.n,
                           best);
    } else if (!nan_row && !same_row(o, full[size_t(r)])) {
      return fmt::format("V={} row {}: a candidates row differs beside argmax rows", V, r);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {  // row invariance: alone, the same bytes
    cuda::candidates(dl.p + r * V, 1, V, dsp.p + r, dout.p + rows, scratch.p);
    if (!same_row(dout.get()[size_t(rows)], out[size_t(r)]))
      return fmt::format("V={} row {} of the mixed call differs when computed alone", V, r);
  }
  return {};
}

}  // namespace

std::string check_cuda_candidates() {
  std::mt19937 rng(94);
  const int64_t C = cuda::kCandidates;
  for (int64_t V : {cuda::kMaxSampledVocab, int64_t(128256), int64_t(49152), int64_t(1000), int64_t(100)}) {
    const int64_t rows = 7;
    std::vector<float> l = random_floats(size_t(rows * V), rng, 8.0f);
    for (int64_t i = 0; i < V; ++i)
      l[size_t(V + i)] = i < 600 ? 3.0f : -1.0f - std::fabs(l[size_t(V + i)]);  // row 1: ties across the cut
    for (int64_t i = 0; i < V; i += 3) l[size_t(2 * V + i)] = 5.0f;             // row 2: a tied maximum
    for (int64_t i = 0; i < V; ++i)  // row 4: ties at the cut spread over every 4096-logit chunk
      l[size_t(4 * V + i)] = i % 97 == 0 || i + 1 == V ? 6.0f : -1.0f - std::fabs(l[size_t(4 * V + i)]);
    l[size_t(6 * V + V - 1)] = 40.0f;  // row 6: its maximum the last logit, in the last chunk
    std::vector<cuda::SampleRow> sp(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      sp[size_t(r)] = {r == 3 ? 0.0 : 0.5 + 0.25 * double(r), 1000 + uint64_t(r), 17 + r};
    Buf<float> dl(l);
    Buf<cuda::SampleRow> dsp(sp);
    std::vector<cuda::RowCandidatesDev> init(size_t(rows + 1));
    Buf<cuda::RowCandidatesDev> dout(init);
    Buf<char> scratch(std::vector<char>(cuda::candidates_scratch_bytes(rows, V)));
    cuda::candidates(dl.p, rows, V, dsp.p, dout.p, scratch.p);
    auto out = dout.get();
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = l.data() + r * V;
      const cuda::RowCandidatesDev& o = out[size_t(r)];
      std::vector<int32_t> order(static_cast<size_t>(V));
      for (int32_t i = 0; i < int32_t(V); ++i) order[size_t(i)] = i;
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
      const int64_t want = std::min(C, V);
      std::vector<std::pair<float, int32_t>> got;
      for (int32_t i = 0; i < o.n; ++i) got.push_back({-o.logit[i], o.id[i]});
      std::sort(got.begin(), got.end());
      if (o.n != want || o.nan != 0)
        return fmt::format("V={} row {}: {} candidates (expected {}), NaN flag {}", V, r, o.n, want, o.nan);
      for (int64_t i = 0; i < want; ++i)
        if (got[size_t(i)].second != order[size_t(i)] || -got[size_t(i)].first != x[order[size_t(i)]])
          return fmt::format("V={} row {}: candidate {} is {}, expected {}", V, r, i, got[size_t(i)].second,
                             order[size_t(i)]);
      if (o.greedy != order[0]) return fmt::format("V={} row {}: greedy {} expected {}", V, r, o.greedy, order[0]);
      double mx = x[order[0]], s = 0;
      for (int64_t v = 0; v < V; ++v) s += std::exp(double(x[v]) - mx);
      const double lse = mx + std::log(s);
      // Both sums are float64 over V terms: V * 2^-53 relative each, far below a float32 rounding.
      if (!(std::fabs(o.lse - lse) <= double(V) * 0x1.0p-52 * (std::fabs(lse) + 1)))
        return fmt::format("V={} row {}: lse {} vs {}", V, r, o.lse, lse);
      const double T = sp[size_t(r)].temperature;
      if (T > 0) {
        // The whole vocabulary's mass at the row's temperature, which top_p alone normalises by on the host.
        double st = 0;
        for (int64_t v = 0; v < V; ++v) st += std::exp(double(x[v]) / T - mx / T);
        if (o.max_t != mx / T || !(std::fabs(o.sum_t - st) <= double(V) * 0x1.0p-52 * st))
          return fmt::format("V={} row {}: max_t {} sum_t {} vs {} {}", V, r, o.max_t, o.sum_t, mx / T, st);
        int32_t best = 0;
        double bv = -INFINITY;
        for (int32_t v = 0; v < int32_t(V); ++v) {
          const double val = double(x[v]) / T + gumbel_ref(sp[size_t(r)].seed, sp[size_t(r)].pos, v);
          if (val > bv || (val == bv && x[v] > x[best])) bv = val, best = v;
        }
        if (o.gumbel != best) return fmt::format("V={} row {}: gumbel pick {} expected {}", V, r, o.gumbel, best);
      }
    }
    // Row invariance: each row alone gives the same bytes.
    for (int64_t r = 0; r < rows; ++r) {
      cuda::candidates(dl.p + r * V, 1, V, dsp.p + r, dout.p + rows, scratch.p);
      auto again = dout.get();
      if (std::memcmp(&again[size_t(rows)], &out[size_t(r)], offsetof(cuda::RowCandidatesDev, logit)) != 0)
        return fmt::format("V={} row {} differs when computed alone", V, r);
    }
    if (std::string fault = check_argmax_rows(V, l, rows, sp, out); !fault.empty()) return fault;
  }
  return {};
}

}  // namespace tf::contract

namespace tf::contract {

// A norm's or SwiGLU's split output gives a product the same bits as the product's own split of the same values.
std::string check_cuda_split_producers() {
  std::mt19937 rng(91);
  const int64_t E = 768, F = 512, O = 64;
  auto w1 = random_weight(GgmlType::Q4_K, E, O, rng), w2 = random_weight(GgmlType::Q4_K, F, O, rng);
  Buf<uint8_t> d1(std::vector<uint8_t>(cuda::device_matrix_bytes(GgmlType::Q4_K, E, O)));
  Buf<uint8_t> d2(std::vector<uint8_t>(cuda::device_matrix_bytes(GgmlType::Q4_K, F, O)));
  const cuda::DeviceMatrix m1 = cuda::upload_matrix(GgmlType::Q4_K, w1.data(), E, O, d1.p);
  const cuda::DeviceMatrix m2 = cuda::upload_matrix(GgmlType::Q4_K, w2.data(), F, O, d2.p);
  // gate|up of 2F outputs from E-wide rows: 64 tiles over 3 slices, the split kernels up to 32 rows.
  auto w3 = random_weight(GgmlType::Q4_K, 3 * 256, 2 * F, rng);
  Buf<uint8_t> d3(std::vector<uint8_t>(cuda::device_matrix_bytes(GgmlType::Q4_K, 3 * 256, 2 * F)));
  const cuda::DeviceMatrix m3 = cuda::upload_matrix(GgmlType::Q4_K, w3.data(), 3 * 256, 2 * F, d3.p);
  for (int64_t rows : {1, 7, 40}) {
    Buf<float> x(random_floats(size_t(rows * E), rng)), wn(random_floats(size_t(E), rng));
    Buf<float> gu(random_floats(size_t(rows * 2 * F), rng, 3.0f));
    Buf<float> a(std::vector<float>(size_t(rows * E + 1))), b(std::vector<float>(size_t(rows * E + 1)));
    Buf<float> xs(std::vector<float>(size_t(rows * E))), xsum(std::vector<float>(size_t(rows * E / 32)));
    Buf<float> ya(std::vector<float>(size_t(rows * O))), yb(std::vector<float>(size_t(rows * O)));
    // The product of the producer's split and the producer's own plain output both equal the plain path's.
    auto same = [&](const char* what, int64_t width) -> std::string {
      const auto p = ya.get(), q = yb.get();
      if (int64_t d = first_bit_difference(p.data(), q.data(), p.size()); d >= 0)
        return fmt::format("{} rows={}: the product of the producer's split differs at {}", what, rows, d);
      const auto u = a.get(), v = b.get();
      if (int64_t d = first_bit_difference(u.data(), v.data(), size_t(rows * width)); d >= 0)
        return fmt::format("{} rows={}: the split form's own output differs at {}", what, rows, d);
      return {};
    };
    cuda::rmsnorm(x.p, wn.p, rows, E, 1e-5f, a.p);
    cuda::rmsnorm(x.p, wn.p, rows, E, 1e-5f, b.p, xs.p, xsum.p);
    cuda::gemv(m1, a.p, rows, ya.p);
    cuda::gemv(m1, b.p, rows, yb.p, nullptr, cuda::SplitX{xs.p, xsum.p});
    if (auto why = same("rmsnorm", E); !why.empty()) return why;
    cuda::swiglu_pairs(gu.p, rows, F, a.p);
    cuda::swiglu_pairs(gu.p, rows, F, b.p, xs.p, xsum.p);
    cuda::gemv(m2, a.p, rows, ya.p);
    cuda::gemv(m2, b.p, rows, yb.p, nullptr, cuda::SplitX{xs.p, xsum.p});
    if (auto why = same("swiglu", F); !why.empty()) return why;
    // gate|up straight from a split product's partials: the bits of the product's own reduction, then SwiGLU.
    cuda::gemv(m3, x.p, rows, gu.p);
    cuda::swiglu_pairs(gu.p, rows, F, a.p, xs.p, xsum.p);
    const auto xs_a = xs.get(), xsum_a = xsum.get();
    const std::vector<float> nan(gu.n, std::nanf(""));
    cuda::copy_to_device(gu.p, nan.data(), nan.size() * 4);  // what the partials path must not read
    cuda::gemv(m1, x.p, rows, ya.p);  // another product's partials over the scratch: the next one must write its own
    const cuda::Partials parts = cuda::gemv_partials(m3, x.p, rows, gu.p);
    if ((parts.p != nullptr) != (rows <= cuda::gemv_split_rows()))
      return fmt::format("rows={}: the gate|up product {} partials", rows, parts.p ? "left" : "did not leave");
    cuda::swiglu_pairs(gu.p, rows, F, b.p, xs.p, xsum.p, parts);
    if (int64_t d = first_bit_difference(a.get().data(), b.get().data(), size_t(rows * F)); d >= 0)
      return fmt::format("swiglu from partials rows={}: output differs at {}", rows, d);
    if (first_bit_difference(xs_a.data(), xs.get().data(), xs_a.size()) >= 0 ||
        first_bit_difference(xsum_a.data(), xsum.get().data(), xsum_a.size()) >= 0)
      return fmt::format("swiglu from partials rows={}: the split output differs", rows);
  }
  return check_staged_products(rng);
}

}  // namespace tf::contract
