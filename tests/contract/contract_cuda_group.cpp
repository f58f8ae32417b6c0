// One-row Q|K|V in one launch (gemv_group): float64 reference and mma's bound, each output bit-equal to its own
// matrix's gemv alone and as one row of three, canaries, the split x from a producer, and the groups it refuses.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <deque>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_gemv.h"
#include "backend/cuda/cuda_mma.h"
#include "backend/cuda/cuda_ops.h"
#include "cuda_buf.h"
#include "harness.h"

namespace tf::contract {
std::vector<double> min_magnitudes(GgmlType type, const std::vector<uint8_t>& wb, int64_t n_in, int64_t n_out);
namespace {

struct GroupCase {
  int64_t n_in;
  std::vector<GgmlType> types;
  std::vector<int64_t> n_out;
  bool nan;  // one activation NaN: every output NaN
};

std::string check_case(const GroupCase& c, std::mt19937& rng) {
  const std::string name = fmt::format("group {}x{}", c.n_in, fmt::join(c.n_out, "|"));
  const size_t k = c.types.size();
  std::vector<std::vector<uint8_t>> wb;
  std::deque<Mem> dw;
  std::vector<cuda::DeviceMatrix> ms;
  for (size_t i = 0; i < k; ++i) {
    wb.push_back(random_weight(c.types[i], c.n_in, c.n_out[i], rng));
    dw.emplace_back(cuda::device_matrix_bytes(c.types[i], c.n_in, c.n_out[i]));
    ms.push_back(cuda::upload_matrix(c.types[i], wb[i].data(), c.n_in, c.n_out[i], dw.back().p));
    if (!ms.back().mma) return name + ": tensor-core layout expected";
  }
  // Three rows; the group takes row 1 alone.
  auto x = random_floats(size_t(3 * c.n_in), rng);
  if (c.nan) x[size_t(c.n_in + c.n_in / 3)] = NAN;
  Mem dx(x.size() * 4);
  cuda::copy_to_device(dx.p, x.data(), x.size() * 4);
  const float* x1 = dx.f() + c.n_in;
  constexpr size_t kPad = 64;
  std::deque<Mem> dy, d1, d3;
  std::vector<const cuda::DeviceMatrix*> ws;
  std::vector<float*> ys;
  for (size_t i = 0; i < k; ++i) {
    dy.emplace_back((size_t(c.n_out[i]) + kPad) * 4);
    d1.emplace_back(size_t(c.n_out[i]) * 4);
    d3.emplace_back(size_t(3 * c.n_out[i]) * 4);
    auto canary = with_canary(size_t(c.n_out[i]), kPad);
    cuda::copy_to_device(dy.back().p, canary.data(), canary.size() * 4);
    ws.push_back(&ms[i]), ys.push_back(dy.back().f());
    cuda::gemv(ms[i], x1, 1, d1.back().f());
    cuda::gemv(ms[i], dx.f(), 3, d3.back().f());
  }
  if (!cuda::gemv_group(ws.data(), ys.data(), int(k), x1, 1)) return name + ": refused";
  for (size_t i = 0; i < k; ++i) {
    const int64_t n_out = c.n_out[i];
    const auto got = to_host(dy[i].p, size_t(n_out) + kPad);
    if (!canary_intact(got, size_t(n_out))) return fmt::format("{}: product {} wrote past its output", name, i);
    const auto alone = to_host(d1[i].p, size_t(n_out)), three = to_host(d3[i].p, size_t(3 * n_out));
    if (int64_t d = first_bit_difference(got.data(), alone.data(), size_t(n_out)); d >= 0)
      return fmt::format("{}: product {} col {} differs from its gemv alone: {} vs {}", name, i, d, got[size_t(d)],
                         alone[size_t(d)]);
    if (int64_t d = first_bit_difference(got.data(), three.data() + n_out, size_t(n_out)); d >= 0)
      return fmt::format("{}: product {} col {} differs from row 1 of three", name, i, d);
    const std::vector<double> wd = decode_weights(c.types[i], wb[i], c.n_in, n_out);
    const std::vector<double> mins = min_magnitudes(c.types[i], wb[i], c.n_in, n_out);
    const double G = c.types[i] == GgmlType::Q6_K ? 16 : 32, slices = double(ms[i].slices);
    for (int64_t o = 0; o < n_out; ++o) {
      const auto [ref, s] = ref_dot(wd.data() + o * c.n_in, x.data() + c.n_in, c.n_in);
      const double y = got[size_t(o)];
      if (std::isnan(ref) != std::isnan(y))
        return fmt::format("{}: product {} col {}: {} where the reference is {}", name, i, o, y, ref);
      double mag = s;
      for (int64_t j = 0; j < c.n_in; ++j)
        mag += mins[size_t(o * c.n_in + j)] * std::fabs(double(x[size_t(c.n_in + j)]));
      const double bound = (0x1.0p-16 + (2 * G + 4) * 0x1.0p-22 + (2 * 256 / G + slices + 34) * 0x1.0p-24) * mag;
      if (!std::isnan(ref) && !(std::fabs(y - ref) <= bound))
        return fmt::format("{}: product {} col {}: |{} - {}| > {:.3g}", name, i, o, y, ref, bound);
    }
  }
  return {};
}

// Three random matrices of one n_in uploaded (their device memory in dw); returns their host bytes.
std::vector<std::vector<uint8_t>> upload3(const std::array<GgmlType, 3>& types, int64_t n_in,
                                          const std::array<int64_t, 3>& n_out, std::mt19937& rng, std::deque<Mem>& dw,
                                          std::vector<cuda::DeviceMatrix>& ms) {
  std::vector<std::vector<uint8_t>> wb;
  for (size_t i = 0; i < 3; ++i) {
    wb.push_back(random_weight(types[i], n_in, n_out[i], rng));
    dw.emplace_back(cuda::device_matrix_bytes(types[i], n_in, n_out[i]));
    ms.push_back(cuda::upload_matrix(types[i], wb[i].data(), n_in, n_out[i], dw.back().p));
  }
  return wb;
}

// x split by its producer (RMSNorm's split output), as the model passes it: the same bits as gemv of the norm's output.
std::string check_split_producer(std::mt19937& rng) {
  const int64_t n_in = 512;
  const std::array<GgmlType, 3> types = {GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K};
  const std::array<int64_t, 3> n_out = {2048, 512, 512};
  std::deque<Mem> dw, dy, dr;
  std::vector<cuda::DeviceMatrix> ms;
  auto x = random_floats(size_t(n_in), rng), nw = random_floats(size_t(n_in), rng);
  Mem dx{size_t(n_in) * 4}, dn{size_t(n_in) * 4}, dh{size_t(n_in) * 4}, xs{size_t(n_in) * 4}, xsum{size_t(n_in)};
  cuda::copy_to_device(dx.p, x.data(), x.size() * 4);
  cuda::copy_to_device(dn.p, nw.data(), nw.size() * 4);
  cuda::rmsnorm(dx.f(), dn.f(), 1, n_in, 1e-5f, dh.f(), xs.p, xsum.f());
  std::vector<const cuda::DeviceMatrix*> ws;
  std::vector<float*> ys;
  upload3(types, n_in, n_out, rng, dw, ms);
  for (size_t i = 0; i < 3; ++i) {
    dy.emplace_back(size_t(n_out[i]) * 4), dr.emplace_back(size_t(n_out[i]) * 4);
    cuda::gemv(ms[i], dh.f(), 1, dr.back().f());
  }
  for (size_t i = 0; i < 3; ++i) ws.push_back(&ms[i]), ys.push_back(dy[i].f());
  if (!cuda::gemv_group(ws.data(), ys.data(), 3, dh.f(), 1, {xs.p, xsum.f()})) return "producer's split: refused";
  for (size_t i = 0; i < 3; ++i) {
    const auto got = to_host(dy[i].p, size_t(n_out[i])), want = to_host(dr[i].p, size_t(n_out[i]));
    if (int64_t d = first_bit_difference(got.data(), want.data(), got.size()); d >= 0)
      return fmt::format("producer's split: product {} col {} differs from gemv of the norm's output", i, d);
  }
  // Refused, launching nothing: two rows, a staged x, mixed lengths, a third format, one matrix.
  Mem dw2(cuda::device_matrix_bytes(GgmlType::Q8_0, n_in, 64)), dw3(cuda::device_matrix_bytes(GgmlType::Q4_K, 256, 64));
  const auto w2 = random_weight(GgmlType::Q8_0, n_in, 64, rng), w3 = random_weight(GgmlType::Q4_K, 256, 64, rng);
  cuda::DeviceMatrix q8 = cuda::upload_matrix(GgmlType::Q8_0, w2.data(), n_in, 64, dw2.p);
  cuda::DeviceMatrix short_k = cuda::upload_matrix(GgmlType::Q4_K, w3.data(), 256, 64, dw3.p);
  const cuda::DeviceMatrix* third[3] = {&ms[0], &ms[2], &q8};
  const cuda::DeviceMatrix* mixed[2] = {&ms[0], &short_k};
  struct Refusal {
    const char* what;
    bool taken;
  };
  for (const auto& [what, taken] :
       {Refusal{"two rows", cuda::gemv_group(ws.data(), ys.data(), 3, dh.f(), 2)},
        Refusal{"a staged x", cuda::gemv_group(ws.data(), ys.data(), 3, dh.f(), 1, {xs.p, xsum.f(), true})},
        Refusal{"mixed lengths", cuda::gemv_group(mixed, ys.data(), 2, dh.f(), 1)},
        Refusal{"a third format", cuda::gemv_group(third, ys.data(), 3, dh.f(), 1)},
        Refusal{"one matrix", cuda::gemv_group(ws.data(), ys.data(), 1, dh.f(), 1)}})
    if (taken) return fmt::format("a group of {} was launched", what);
  return {};
}

// Products whose x comes from a producer still running (PDL): the one-row and few-row kernels issue their weight
// loads before griddepcontrol.wait, and must read x only after it. A kernel that idles first copies x's image in.
std::string check_late_producer(std::mt19937& rng) {
  {  // the late producer copies whole 16-byte words only: anything else is refused before it launches
    Mem a{32}, b{32};
    try {
      cuda::copy_after(a.p, b.p, 20, 0);
      return "copy_after of 20 bytes was not refused";
    } catch (const std::runtime_error& e) {
      if (std::string(e.what()).find("16-byte words") == std::string::npos)
        return fmt::format("copy_after of 20 bytes refused as '{}'", e.what());
    }
  }
  const int64_t n_in = 512;
  const std::array<GgmlType, 3> types = {GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K};
  const std::array<int64_t, 3> n_out = {2048, 512, 512};  // 128 tiles: a block per tile; 32: the split kernel
  std::deque<Mem> dw;
  std::vector<cuda::DeviceMatrix> ms;
  upload3(types, n_in, n_out, rng, dw, ms);
  for (int64_t rows : {1, 3}) {
    const size_t xs_bytes = size_t(rows * n_in) * 4, bytes = xs_bytes + size_t(rows * (n_in / 32)) * 4;
    const auto x = random_floats(size_t(rows * n_in), rng), nw = random_floats(size_t(n_in), rng),
               stale = random_floats(bytes / 4, rng);
    Mem dx{xs_bytes}, dn{size_t(n_in) * 4}, dh{xs_bytes}, ready{bytes}, late{bytes};
    cuda::copy_to_device(dx.p, x.data(), xs_bytes), cuda::copy_to_device(dn.p, nw.data(), nw.size() * 4);
    auto xsum_of = [&](const Mem& m) { return reinterpret_cast<float*>(static_cast<uint8_t*>(m.p) + xs_bytes); };
    cuda::rmsnorm(dx.f(), dn.f(), rows, n_in, 1e-5f, dh.f(), ready.p, xsum_of(ready));
    const cuda::SplitX pre{late.p, xsum_of(late)};
    std::deque<Mem> want, got;
    std::vector<float*> ys;
    for (size_t i = 0; i < 3; ++i) {
      const size_t n = size_t(rows * n_out[i]);
      want.emplace_back(n * 4), got.emplace_back(n * 4), ys.push_back(got.back().f());
      cuda::gemv(ms[i], dh.f(), rows, want.back().f());
      cuda::copy_to_device(late.p, stale.data(), bytes);
      cuda::copy_after(late.p, ready.p, int64_t(bytes), 50000);
      cuda::gemv(ms[i], dh.f(), rows, got.back().f(), nullptr, pre);
    }
    auto differs = [&](const char* what) -> std::string {
      for (size_t i = 0; i < 3; ++i) {
        const size_t n = size_t(rows * n_out[i]);
        const auto g = to_host(got[i].p, n), w = to_host(want[i].p, n);
        if (int64_t d = first_bit_difference(g.data(), w.data(), n); d >= 0)
          return fmt::format("late producer, {} row(s), {} {}: element {} is {}, {} with x ready", rows, what, i, d,
                             g[size_t(d)], w[size_t(d)]);
      }
      return {};
    };
    if (std::string why = differs("product"); !why.empty()) return why;
    if (rows > 1) continue;
    std::vector<const cuda::DeviceMatrix*> ws = {&ms[0], &ms[1], &ms[2]};
    cuda::copy_to_device(late.p, stale.data(), bytes);
    cuda::copy_after(late.p, ready.p, int64_t(bytes), 50000);
    if (!cuda::gemv_group(ws.data(), ys.data(), 3, dh.f(), 1, pre)) return "late producer: group refused";
    if (std::string why = differs("group product"); !why.empty()) return why;
  }
  return {};
}

// RoPE and the KV store in the group (NORM pairs): Q and the row's page slot against the group's plain outputs rotated
// here by rope_store's float steps, the rest of the pool untouched, and bit-equal to the plain group then rope_store.
std::string check_rope(std::mt19937& rng, int n_rot) {
  const std::string name = fmt::format("group RoPE n_rot {}", n_rot);
  const int n_in = 512, D = 64, n_head = 4, kv_row = 2 * D, Dq = n_head * D, page = 16, half = n_rot / 2;
  const std::array<GgmlType, 3> types = {GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K};
  const std::array<int64_t, 3> n_out = {Dq, kv_row, kv_row};
  const int64_t page_floats = 4 * page * kv_row, layer_offset = 2 * page * kv_row, pool = 3 * page_floats;
  const int32_t pos = 21, seq = 0;
  const std::vector<int32_t> table = {2, 0, 1};  // position 21: the table's second page, pool page 0, slot 5
  std::deque<Mem> dw, dy;
  std::vector<cuda::DeviceMatrix> ms;
  std::vector<const cuda::DeviceMatrix*> ws;
  std::vector<float*> ys;
  upload3(types, n_in, n_out, rng, dw, ms);
  for (size_t i = 0; i < 3; ++i) dy.emplace_back(size_t(n_out[i]) * 4);
  for (size_t i = 0; i < 3; ++i) ws.push_back(&ms[i]), ys.push_back(dy[i].f());
  const auto x = random_floats(size_t(n_in), rng), cs = random_floats(size_t(half), rng),
             sn = random_floats(size_t(half), rng), pool0 = random_floats(size_t(pool), rng);
  Mem dx{size_t(n_in) * 4}, dc{size_t(half + 1) * 4}, ds{size_t(half + 1) * 4}, dpos{4}, dseq{4}, dtab{12},
      dkv{size_t(pool) * 4}, dkv2{size_t(pool) * 4}, dq2{size_t(Dq) * 4};
  cuda::copy_to_device(dx.p, x.data(), x.size() * 4);
  cuda::copy_to_device(dc.p, cs.data(), cs.size() * 4), cuda::copy_to_device(ds.p, sn.data(), sn.size() * 4);
  cuda::copy_to_device(dpos.p, &pos, 4), cuda::copy_to_device(dseq.p, &seq, 4);
  cuda::copy_to_device(dtab.p, table.data(), 12);
  cuda::copy_to_device(dkv.p, pool0.data(), pool0.size() * 4), cuda::copy_to_device(dkv2.p, pool0.data(), pool * 4);
  auto ip = [](const Mem& m) { return static_cast<const int32_t*>(m.p); };
  const cuda::RopeKv rk{true,     D,        half, kv_row,  dc.f(),      ds.f(),       ip(dpos),
                        ip(dseq), ip(dtab), 3,    dkv.f(), page_floats, layer_offset, page};
  // The plain group first: its Q, K and V are what the fused form rotates and stores.
  cuda::mma_set_group(1);
  if (!cuda::gemv_group(ws.data(), ys.data(), 3, dx.f(), 1)) return name + ": plain group refused";
  std::array<std::vector<float>, 3> plain;
  for (size_t i = 0; i < 3; ++i) plain[i] = to_host(dy[i].p, size_t(n_out[i]));
  cuda::copy_to_device(dq2.p, plain[0].data(), size_t(Dq) * 4);
  cuda::rope_store(dq2.f(), Dq, n_head, {dy[1].f(), 0, kv_row}, {dy[2].f(), 0, kv_row}, 1, D, n_rot, dc.f(), ds.f(),
                   false, ip(dpos), ip(dseq), ip(dtab), 3, dkv2.f(), page_floats, layer_offset, page, kv_row);
  float* qf = dy[0].f();
  const std::array<float*, 3> qy{qf, nullptr, nullptr};
  if (cuda::gemv_group(ws.data(), qy.data(), 3, dx.f(), 1, {}, rk)) return name + ": taken with the RoPE form off";
  cuda::mma_set_group(2);
  // RoPE it cannot do is an error before any launch: an odd head, K not one KV row, two matrices.
  cuda::RopeKv odd = rk, short_k = rk;
  odd.head_dim = D - 1, short_k.kv_row = kv_row / 2;
  for (const auto& [what, r, count] : {std::tuple{"an odd head", odd, 3}, std::tuple{"K not one KV row", short_k, 3},
                                       std::tuple{"two matrices", rk, 2}}) {
    try {
      cuda::gemv_group(ws.data(), qy.data(), count, dx.f(), 1, {}, r);
      return fmt::format("{}: RoPE with {} was not refused", name, what);
    } catch (const std::runtime_error& e) {
      if (std::string(e.what()).find("RoPE needs") == std::string::npos)
        return fmt::format("{}: RoPE with {} refused as '{}'", name, what, e.what());
    }
    if (first_bit_difference(to_host(dkv.p, size_t(pool)).data(), pool0.data(), size_t(pool)) >= 0)
      return fmt::format("{}: a refused RoPE ({}) wrote the KV pool", name, what);
  }
  if (!cuda::gemv_group(ws.data(), qy.data(), 3, dx.f(), 1, {}, rk)) return name + ": refused";
  // rope_store's steps on the host: each product rounded once, then the difference or sum.
  auto rotated = [&](const std::vector<float>& v) {
    std::vector<float> r = v;
    for (size_t h0 = 0; h0 < v.size(); h0 += D)
      for (int p = 0; p < half; ++p) {
        const float x0 = v[h0 + 2 * p], x1 = v[h0 + 2 * p + 1], a = x0 * cs[p], b = x1 * sn[p], e = x0 * sn[p],
                    f = x1 * cs[p];
        r[h0 + 2 * p] = a - b, r[h0 + 2 * p + 1] = e + f;
      }
    return r;
  };
  std::vector<float> want = pool0;
  const std::vector<float> k = rotated(plain[1]);
  const int64_t slot = layer_offset + int64_t(pos % page) * kv_row;  // pool page 0
  for (int j = 0; j < kv_row; ++j) want[size_t(slot + j)] = k[j], want[size_t(slot + page * kv_row + j)] = plain[2][j];
  const auto q = to_host(qf, size_t(Dq)), kv = to_host(dkv.p, size_t(pool)), q2 = to_host(dq2.p, size_t(Dq)),
             kv2 = to_host(dkv2.p, size_t(pool));
  const std::vector<float> qw = rotated(plain[0]);
  if (int64_t d = first_bit_difference(q.data(), qw.data(), q.size()); d >= 0)
    return fmt::format("{}: Q element {} is {}, rotated here {}", name, d, q[size_t(d)], qw[size_t(d)]);
  if (int64_t d = first_bit_difference(kv.data(), want.data(), kv.size()); d >= 0)
    return fmt::format("{}: the KV pool at {} holds {}, expected {}", name, d, kv[size_t(d)], want[size_t(d)]);
  if (first_bit_difference(q.data(), q2.data(), q.size()) >= 0 ||
      first_bit_difference(kv.data(), kv2.data(), kv.size()) >= 0)
    return name + ": differs from the plain group then rope_store";
  return {};
}

}  // namespace

std::string check_cuda_mma_group() {
  struct Keep {  // the mode as the environment set it, whatever the check does
    int mode = cuda::mma_group_mode();
    ~Keep() { cuda::mma_set_group(mode); }
  } keep;
  cuda::mma_set_group(1);
  std::mt19937 rng(2026);
  using T = GgmlType;
  const std::vector<GroupCase> cases = {
      {768, {T::Q4_K, T::Q4_K, T::Q6_K}, {1536, 256, 256}, false},     // a Q4_K_M layer's formats
      {512, {T::Q6_K, T::Q4_K}, {200, 328}, true},                     // a partial tile before the join
      {512, {T::Q4_K, T::Q4_K, T::Q6_K}, {264, 72, 200}, false},       // laid out V, Q, K: partial tiles at both joins
      {4096, {T::Q4_K, T::Q4_K, T::Q6_K}, {4096, 1024, 1024}, false},  // the 8B layer: K and V alone run split
      {576, {T::Q4_0, T::Q4_0, T::Q4_0}, {576, 192, 192}, true},
      {576, {T::Q4_1, T::Q4_1, T::Q4_1}, {576, 192, 192}, false},
      {1024, {T::Q8_0, T::Q8_0, T::Q8_0}, {1024, 256, 256}, true},
      {512, {T::Q6_K, T::Q6_K, T::Q6_K}, {520, 128, 128}, false},
      {512, {T::BF16, T::BF16, T::BF16}, {512, 136, 136}, false},
  };
  for (const GroupCase& c : cases)
    if (std::string why = check_case(c, rng); !why.empty()) return why;
  if (std::string why = check_split_producer(rng); !why.empty()) return why;
  if (std::string why = check_late_producer(rng); !why.empty()) return why;
  for (int n_rot : {64, 32})  // whole heads rotated, and half of each (the rest stored as it is)
    if (std::string why = check_rope(rng, n_rot); !why.empty()) return why;
  return {};
}

}  // namespace tf::contract
