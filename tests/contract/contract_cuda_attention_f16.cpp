// CUDA prompt attention (fp16, one mma a step) against a float64 reference and its derived bound, with every row
// against itself alone and a canary after the output.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/cuda_gemv.h"
#include "harness.h"

namespace tf::contract {
namespace {

using cuda::upload;

struct PromptCase {
  int64_t hd, nh, nkv;
  std::vector<int32_t> pos, seq;
  int64_t bad_key = -1;  // sequence 0's key at this position gets bad_value (in V, or in K)
  float bad_value = NAN;
  bool bad_in_k = false;
  int q_exp = 0, k_exp = 0, v_exp = 0;  // powers of two on every query, key and value
  int64_t page = 16;
};

// conv: the keys converted once a call (PromptKeys), each output also equal bit for bit to the blocks' own conversion.
std::string prompt_case(const PromptCase& c, std::mt19937& rng, bool conv) {
  const int64_t hd = c.hd, nh = c.nh, nkv = c.nkv, P = c.page, kvr = nkv * hd, max_keys = 2000;
  const int64_t max_pages = (max_keys + 1 + P) / P, n_seq = 2, page_floats = 2 * P * kvr, n_pages = n_seq * max_pages;
  auto pool = random_floats(size_t(n_pages * page_floats), rng);
  for (int64_t pg = 0; pg < n_pages; ++pg)  // every physical page scaled once: K rows, then V rows
    for (int64_t i = 0; i < page_floats; ++i)
      pool[size_t(pg * page_floats + i)] =
          std::ldexp(pool[size_t(pg * page_floats + i)], i < P * kvr ? c.k_exp : c.v_exp);
  int64_t mul = 7;  // scrambled, and a permutation: a multiplier prime to the page count
  while (std::gcd(mul, n_pages) != 1) ++mul;
  std::vector<int32_t> table(size_t(n_seq * max_pages));
  for (int64_t i = 0; i < int64_t(table.size()); ++i) table[size_t(i)] = int32_t((i * mul + 3) % n_pages);
  const int64_t rows = int64_t(c.pos.size()), qs = nh * hd + 2 * kvr;
  auto q = random_floats(size_t(rows * qs), rng);
  for (float& x : q) x = std::ldexp(x, c.q_exp);
  const float scale = float(1.0 / std::sqrt(double(hd)));
  auto K = [&](int s, int64_t j) {
    return pool.data() + table[size_t(s * max_pages + j / P)] * page_floats + (j % P) * kvr;
  };
  auto V = [&](int s, int64_t j) { return K(s, j) + P * kvr; };
  for (float x : pool)  // the case is what it says: finite inputs in range, but for the planted key
    if (!std::isfinite(x)) return fmt::format("hd {}: the case's keys and values are not all finite", hd);
  for (float x : q)
    if (!std::isfinite(x)) return fmt::format("hd {}: the case's queries are not all finite", hd);
  if (c.bad_key >= 0)  // rows before it must not see it
    for (int64_t i = 0; i < kvr; ++i) (c.bad_in_k ? K(0, c.bad_key) : V(0, c.bad_key))[i] = c.bad_value;
  float *dpool = upload(pool), *dq = upload(q);
  int32_t *dtable = upload(table), *dpos = upload(c.pos), *dseq = upload(c.seq);
  const size_t n_out = size_t(rows * nh * hd), pad = size_t(nh * hd);
  auto canary = with_canary(n_out, pad);
  float* dout = upload(canary);
  cuda::PagedKv kv{dpool, page_floats, 0, P, kvr, dtable, max_pages};
  // Each sequence's keys at whole 32-key tiles one after another, in a scratch with room to spare (its strides).
  std::vector<int32_t> key_slot(static_cast<size_t>(n_seq)), key_count(static_cast<size_t>(n_seq));
  int64_t tiles = 0;
  const int64_t slots =
      cuda::prompt_key_layout(c.pos.data(), c.seq.data(), rows, n_seq, key_slot.data(), key_count.data(), tiles) + 64;
  void* dkeys = conv ? cuda::device_alloc(cuda::attention_prompt_keys_bytes(slots, nkv, hd)) : nullptr;
  int32_t *dslot = upload(key_slot), *dcount = upload(key_count);
  const cuda::PromptKeys pk{dkeys, dslot, dcount, slots, int(n_seq), int(tiles)};
  auto run = [&](const float* qq, int64_t n, const int32_t* pp, const int32_t* ss) {
    cuda::attention_prompt(qq, qs, n, pp, ss, kv, nh, nkv, hd, scale, dout, conv ? &pk : nullptr);
  };
  std::vector<float> out(n_out + pad), own(n_out), alone(size_t(nh * hd));
  float* down = conv ? upload(canary) : nullptr;  // its own buffer: an output the converted run skips stays the canary
  if (conv) {
    cuda::attention_prompt(dq, qs, rows, dpos, dseq, kv, nh, nkv, hd, scale, down);
    cuda::copy_to_host(own.data(), down, n_out * 4);
  }
  run(dq, rows, dpos, dseq);
  cuda::copy_to_host(out.data(), dout, out.size() * 4);
  std::string why;
  if (!canary_intact(out, n_out)) why = fmt::format("hd {}: written past the output", hd);
  if (int64_t d = conv ? first_bit_difference(own.data(), out.data(), n_out) : -1; why.empty() && d >= 0)
    why = fmt::format("hd {}: converted keys give other bits than the blocks' own conversion (at {})", hd, d);
  const double u = 0x1.0p-11, t22 = 0x1.0p-22;
  for (int64_t r = 0; r < rows && why.empty(); ++r) {
    for (int64_t h = 0; h < nh && why.empty(); ++h) {
      const int64_t g = h / (nh / nkv), nk = c.pos[size_t(r)] + 1;
      const int sq = c.seq[size_t(r)];
      const bool poisoned = c.bad_key >= 0 && sq == 0 && c.pos[size_t(r)] >= c.bad_key;  // attends the bad key: NaN
      const float* qr = q.data() + r * qs + h * hd;
      const AttnRef ref = attention_reference(
          qr, hd, nk, scale, [&](int64_t j) { return K(sq, j) + g * hd; },
          [&](int64_t j) { return V(sq, j) + g * hd; });
      double maxq = 0, maxk = 0, maxv = 0;
      for (int64_t i = 0; i < hd; ++i) maxq = std::max(maxq, std::fabs(double(qr[i])));
      for (int64_t j = 0; j < nk; ++j)
        for (int64_t i = 0; i < hd; ++i)
          maxk = std::max(maxk, std::fabs(double(K(sq, j)[g * hd + i]))),
          maxv = std::max(maxv, std::fabs(double(V(sq, j)[g * hd + i])));
      // Scores: Q times the scale in log2 units (one f32 rounding), Q and K one fp16 rounding each (and subnormal
      // steps under their powers of two), the mma chain, the exponent's fma; each p_j moves by a factor within
      // exp(+-2E); P and V one rounding each, the P V chain, the sums. A half's subnormal step under a power of two
      // of at most 2^126: 2^-25 of max |x| 2^-14, or of 2^-126, for Q in units of Q times the scale.
      const double sl = double(scale) * 1.4426950408889634;
      const double qstep = std::max(maxq * 0x1.000002p-39, 0x1.0p-151 / sl);
      const double kstep = std::max(maxk * 0x1.0p-39, 0x1.0p-151);
      const double E =
          ref.max_s * (2 * u + (double(hd) / 16 + 6) * t22) + scale * double(hd) * (qstep * maxk + kstep * maxq);
      for (int64_t i = 0; i < hd; ++i) {
        double sum_v = 0;
        for (int64_t j = 0; j < nk; ++j) sum_v += std::fabs(double(V(sq, j)[g * hd + i]));
        const double ref_i = ref.out[size_t(i)], got = out[size_t((r * nh + h) * hd + i)];
        const double bound = ref.mag[size_t(i)] * (std::expm1(2 * E) + 4 * u + (double(nk) / 8 + 64) * t22) +
                             0x1.0p-24 * (sum_v + 1) + 0x1.0p-37 * maxv;
        if (poisoned || !std::isfinite(ref_i) ? !std::isnan(got) : !(std::fabs(got - ref_i) <= bound)) {
          why = fmt::format("hd {} pos {} head {} [{}]: {} vs {} (bound {:.3g})", hd, c.pos[size_t(r)], h, i, got,
                            ref_i, bound);
          break;
        }
      }
    }
    if (why.empty()) {
      run(dq + r * qs, 1, dpos + r, dseq + r);
      cuda::copy_to_host(alone.data(), dout, alone.size() * 4);
      if (int64_t d = first_bit_difference(alone.data(), out.data() + r * nh * hd, alone.size()); d >= 0)
        why = fmt::format("hd {}: row at pos {} differs when computed alone (at {})", hd, c.pos[size_t(r)], d);
    }
  }
  for (void* p : {static_cast<void*>(dpool), static_cast<void*>(dq), static_cast<void*>(dtable),
                  static_cast<void*>(dpos), static_cast<void*>(dseq), static_cast<void*>(dout), dkeys,
                  static_cast<void*>(dslot), static_cast<void*>(dcount), static_cast<void*>(down)})
    if (p) cuda::device_free(p);
  return why;
}

std::string prompt_cases(bool conv) {
  try {  // head sizes other than 64 and 128 are refused before any launch
    cuda::attention_prompt(nullptr, 0, 0, nullptr, nullptr, cuda::PagedKv{}, 32, 8, 96, 1.0f, nullptr);
    return "head size 96 was not refused";
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()).find("not head size 96 with 32/8 heads") == std::string::npos)
      return std::string("head size 96 refused for another reason: ") + e.what();
  }
  if (conv) {  // slots not whole tile pairs, or no sequence: refused before any launch
    int32_t dummy = 0;
    for (const cuda::PromptKeys& bad :
         {cuda::PromptKeys{&dummy, &dummy, &dummy, 40, 1, 2}, cuda::PromptKeys{&dummy, &dummy, &dummy, 96, 1, 2},
          cuda::PromptKeys{&dummy, &dummy, &dummy, 64, 0, 2}}) {
      try {
        cuda::attention_prompt(nullptr, 0, 0, nullptr, nullptr, cuda::PagedKv{}, 32, 8, 128, 1.0f, nullptr, &bad);
        return fmt::format("converted keys of {} slots and {} sequences were not refused", bad.slots, bad.n_seqs);
      } catch (const std::logic_error& e) {
        if (std::string(e.what()).find("whole number of tile pairs' slots") == std::string::npos)
          return std::string("bad converted keys refused for another reason: ") + e.what();
      }
    }
  }
  std::mt19937 rng(31);
  const std::vector<int32_t> dpos = {0, 5, 1999, 300, 77}, dseq = {0, 0, 1, 1, 0};
  std::vector<int32_t> cpos, cseq;  // a prefill chunk with another sequence's rows inside and after it
  for (int32_t p = 500; p < 537; ++p) cpos.push_back(p), cseq.push_back(0);
  cpos.insert(cpos.begin() + 9, 40), cseq.insert(cseq.begin() + 9, 1);
  for (int32_t p : {10, 11, 12}) cpos.push_back(p), cseq.push_back(1);
  std::vector<int32_t> fpos, fseq(70, 1);  // a whole prompt from position 0
  for (int32_t p = 0; p < 70; ++p) fpos.push_back(p);
  std::vector<PromptCase> cases = {
      {64, 9, 3, dpos, dseq},
      {128, 32, 8, dpos, dseq},
      {64, 9, 3, cpos, cseq},
      {128, 32, 8, cpos, cseq},
      {128, 32, 8, fpos, fseq},
      {64, 4, 4, cpos, cseq},
      {128, 16, 1, cpos, cseq},
      {128, 24, 2, fpos, fseq},
      {128, 32, 8, cpos, cseq, 520},                          // a NaN value
      {64, 9, 3, cpos, cseq, 520, NAN, true},                 // a NaN key
      {128, 32, 8, cpos, cseq, 520, 0x1.0p31f},               // a value past 2^30
      {64, 9, 3, cpos, cseq, 520, 0x1.0p65f, true},           // a key past 2^64
      {128, 32, 8, cpos, cseq, -1, NAN, false, -20, 20, 20},  // K and V past fp16's range (V scaled down)
      {64, 9, 3, cpos, cseq, -1, NAN, false, 30, -30, 0},     // Q past it, K below it
      {128, 32, 8, cpos, cseq, -1, NAN, false, 0, 0, -20},    // V below fp16's normals
      {64, 9, 3, fpos, fseq, -1, NAN, false, -60, 60, 0},     // Q at 2^-60, K at 2^60: scores of order one
      {64, 9, 3, fpos, fseq, -1, NAN, false, 10, 20, 0},      // scores past 2^30: a hard maximum, finite
      {128, 32, 8, cpos, cseq, -1, NAN, false, 12, 12, 0},    // the same, past 2^24 at head size 128
  };
  for (int64_t page : {8, 32, 48}) cases.push_back({128, 32, 8, cpos, cseq, -1, NAN, false, 0, 0, 0, page});
  for (const PromptCase& c : cases)
    if (auto why = prompt_case(c, rng, conv); !why.empty())
      return fmt::format("{}/{} heads, page {}: {}", c.nh, c.nkv, c.page, why);
  return {};
}

}  // namespace

std::string check_cuda_attention_prompt() { return prompt_cases(false); }
std::string check_cuda_attention_prompt_keys() { return prompt_cases(true); }

}  // namespace tf::contract
