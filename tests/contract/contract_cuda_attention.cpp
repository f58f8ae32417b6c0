// CUDA paged attention against a float64 reference, with row invariance across rows of two sequences.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/cuda_gemv.h"
#include "harness.h"

namespace tf::contract {
namespace {

using cuda::upload;

// The tensor-core kernel writing its output also split: the same output, and an output product whose bits equal
// those of the product's own split.
std::string check_split_output(const float* dq, int64_t qs, int64_t rows, const int32_t* dpos, const int32_t* dseq,
                               const cuda::PagedKv& kv, int64_t nh, int64_t nkv, int64_t hd, float scale,
                               const std::vector<float>& out, std::mt19937& rng, const cuda::AttnChunks& chunks) {
  const int64_t n = nh * hd, O = 16;
  if (n % 64 != 0) return {};
  auto wb = random_weight(GgmlType::Q8_0, n, O, rng);
  void* dw = cuda::device_alloc(cuda::device_matrix_bytes(GgmlType::Q8_0, n, O));
  const cuda::DeviceMatrix m = cuda::upload_matrix(GgmlType::Q8_0, wb.data(), n, O, dw);
  if (!m.mma) {
    cuda::device_free(dw);
    return fmt::format("hd {}: the check's matrix is not in the tensor-core layout", hd);
  }
  float* o2 = static_cast<float*>(cuda::device_alloc(size_t(rows * n) * 4));
  void* xs = cuda::device_alloc(size_t(rows * n) * 4);
  float* xsum = static_cast<float*>(cuda::device_alloc(size_t(rows * n / 32) * 4));
  float* ya = static_cast<float*>(cuda::device_alloc(size_t(rows * O) * 4));
  float* yb = static_cast<float*>(cuda::device_alloc(size_t(rows * O) * 4));
  cuda::attention_mma(dq, qs, rows, dpos, dseq, kv, nh, nkv, hd, scale, o2, xs, xsum, chunks);
  std::vector<float> got(out.size()), a(size_t(rows * O)), b(a.size());
  cuda::copy_to_host(got.data(), o2, got.size() * 4);
  cuda::gemv(m, o2, rows, ya);
  cuda::gemv(m, o2, rows, yb, nullptr, cuda::SplitX{xs, xsum});
  cuda::copy_to_host(a.data(), ya, a.size() * 4);
  cuda::copy_to_host(b.data(), yb, b.size() * 4);
  std::string why;
  if (int64_t d = first_bit_difference(got.data(), out.data(), out.size()); d >= 0)
    why = fmt::format("hd {}: the split form's output differs at {}", hd, d);
  else if (int64_t e = first_bit_difference(a.data(), b.data(), a.size()); e >= 0)
    why = fmt::format("hd {}: the product of the attention's split differs at {}", hd, e);
  for (void* p :
       {dw, static_cast<void*>(o2), xs, static_cast<void*>(xsum), static_cast<void*>(ya), static_cast<void*>(yb)})
    cuda::device_free(p);
  return why;
}

// `mma`: the tensor-core kernel, checked against its own derived bound; else the warp-parallel one.
std::string check_case(int64_t hd, int64_t nh, int64_t nkv, std::mt19937& rng, bool mma,
                       const std::vector<int32_t>& pos, const std::vector<int32_t>& seq, int64_t nan_key = -1,
                       float bad_value = NAN, int64_t P = 16) {
  const int64_t kvr = nkv * hd, max_keys = 2000, max_pages = (max_keys + 1 + P) / P, n_seq = 2;
  const int64_t page_floats = 2 * P * kvr, n_pages = n_seq * max_pages;
  auto pool = random_floats(size_t(n_pages * page_floats), rng);
  std::vector<int32_t> table(size_t(n_seq * max_pages));
  for (int64_t i = 0; i < int64_t(table.size()); ++i) table[size_t(i)] = int32_t((i * 7 + 3) % n_pages);  // scrambled
  const int64_t rows = int64_t(pos.size());
  const int64_t qs = nh * hd + 2 * kvr;  // query rows as the fused QKV product lays them out
  auto q = random_floats(size_t(rows * qs), rng);
  const float scale = float(1.0 / std::sqrt(double(hd)));
  auto K = [&](int s, int64_t j) {
    return pool.data() + table[size_t(s * max_pages + j / P)] * page_floats + (j % P) * kvr;
  };
  auto V = [&](int s, int64_t j) { return K(s, j) + P * kvr; };
  if (nan_key >= 0)  // sequence 0's value at that position: rows before it must not see it
    for (int64_t i = 0; i < kvr; ++i) V(0, nan_key)[i] = bad_value;
  float *dpool = upload(pool), *dq = upload(q);
  int32_t *dtable = upload(table), *dpos = upload(pos), *dseq = upload(seq);
  float* dout = static_cast<float*>(cuda::device_alloc(size_t(rows * nh * hd) * 4));
  cuda::PagedKv kv{dpool, page_floats, 0, P, kvr, dtable, max_pages};
  // Up to 32 rows over several 256-key chunks run a block per chunk and the combine kernel; more rows walk the
  // chunks in one block. The 37-row chunk below against its rows alone compares the two.
  const int64_t chunk_rows = 32, key_cap = max_pages * P;
  const size_t part_bytes = cuda::attention_chunk_bytes(chunk_rows, nh, hd, key_cap);
  float* dpart = static_cast<float*>(cuda::device_alloc(part_bytes));
  // The call's keys as the engine passes them (the most any row attends): within one chunk, keys are pulled into L2.
  const int64_t call_keys = int64_t(*std::max_element(pos.begin(), pos.end())) + 1;
  const cuda::AttnChunks chunks{dpart, chunk_rows, (key_cap + cuda::kAttnChunkKeys - 1) / cuda::kAttnChunkKeys,
                                call_keys};
  auto run = [&](const float* qq, int64_t n, const int32_t* pp, const int32_t* ss, int64_t keys = 0) {
    cuda::AttnChunks ch = chunks;
    if (keys > 0) ch.max_keys = keys;
    if (mma)
      cuda::attention_mma(qq, qs, n, pp, ss, kv, nh, nkv, hd, scale, dout, nullptr, nullptr, ch);
    else
      cuda::attention(qq, qs, n, pp, ss, kv, nh, nkv, hd, scale, max_keys, dout);
  };
  run(dq, rows, dpos, dseq);
  std::vector<float> out(size_t(rows * nh * hd)), alone(size_t(nh * hd));
  cuda::copy_to_host(out.data(), dout, out.size() * 4);
  std::string why;
  if (mma && call_keys <= cuda::kAttnChunkKeys) {  // the L2 pull before the wait moves no bit
    struct Keep {
      ~Keep() { cuda::attention_set_pull(-1); }
    } keep;
    cuda::attention_set_pull(0);
    run(dq, rows, dpos, dseq);
    std::vector<float> unpulled(out.size());
    cuda::copy_to_host(unpulled.data(), dout, unpulled.size() * 4);
    if (int64_t d = first_bit_difference(unpulled.data(), out.data(), out.size()); d >= 0)
      why = fmt::format("hd {}: the run without the L2 pull differs at {}", hd, d);
  }
  if (mma &&
      why.empty()) {  // the whole batch walked in-block (no partials) gives the same bits as its chunk-parallel run
    std::vector<float> walked(out.size());
    cuda::attention_mma(dq, qs, rows, dpos, dseq, kv, nh, nkv, hd, scale, dout);
    cuda::copy_to_host(walked.data(), dout, walked.size() * 4);
    if (int64_t d = first_bit_difference(walked.data(), out.data(), out.size()); d >= 0)
      why = fmt::format("hd {}: the in-block walk differs from the chunk-parallel run at {}", hd, d);
    // Every build forced on every path (chunk-parallel, walked, split output): these grids would not pick them.
    // A build that does not take a call (the one-row build past one chunk, or with no key bound) is not forced there.
    for (int b = 0; b < cuda::attention_builds() && why.empty(); ++b) {
      if (!cuda::attention_build_takes(b, call_keys)) continue;
      struct Force {
        explicit Force(int k) { cuda::attention_force_build(k); }
        ~Force() { cuda::attention_force_build(-1); }
      } force(b);
      const bool one_row = !cuda::attention_build_takes(b, int64_t(1) << 20);
      for (int walk = 0; walk < 2 && why.empty(); ++walk) {
        if (walk && !cuda::attention_build_takes(b, 0)) continue;
        const int64_t launches = cuda::attention_one_row_launches();
        if (walk)
          cuda::attention_mma(dq, qs, rows, dpos, dseq, kv, nh, nkv, hd, scale, dout);
        else
          run(dq, rows, dpos, dseq);
        if (one_row && cuda::attention_one_row_launches() == launches) {
          why = fmt::format("hd {}: the one-row build, forced, did not run", hd);
          break;
        }
        cuda::copy_to_host(walked.data(), dout, walked.size() * 4);
        if (int64_t d = first_bit_difference(walked.data(), out.data(), out.size()); d >= 0)
          why = fmt::format("hd {}: the build '{}' differs ({}) at {}", hd, cuda::attention_build_name(b),
                            walk ? "walked" : "chunk-parallel", d);
      }
      if (why.empty()) why = check_split_output(dq, qs, rows, dpos, dseq, kv, nh, nkv, hd, scale, out, rng, chunks);
      if (!why.empty()) why += fmt::format(" (build '{}')", cuda::attention_build_name(b));
    }
  }
  for (int64_t r = 0; r < rows && why.empty(); ++r) {
    for (int64_t h = 0; h < nh && why.empty(); ++h) {
      const int64_t g = h / (nh / nkv), nk = pos[size_t(r)] + 1;
      const int sq = seq[size_t(r)];
      const bool poisoned = nan_key >= 0 && sq == 0 && pos[size_t(r)] >= nan_key;  // attends the bad value: NaN
      const AttnRef ref_head = attention_reference(
          q.data() + r * qs + h * hd, hd, nk, scale, [&](int64_t j) { return K(sq, j) + g * hd; },
          [&](int64_t j) { return V(sq, j) + g * hd; });
      for (int64_t i = 0; i < hd; ++i) {
        const double ref = ref_head.out[size_t(i)];
        const double got = out[size_t((r * nh + h) * hd + i)];
        // Tensor cores: scores off by max_s (4 * 2^-16 + 3 hd 2^-22) (splits, lo x lo dropped, mma sums), which
        // moves each p_j by twice that; P V splits and mma sums; the warps' merge.
        const double bound =
            mma ? ref_head.mag[size_t(i)] *
                      (2 * ref_head.max_s * (4 * 0x1.0p-16 + 3 * double(hd) * 0x1.0p-22) + 6 * 0x1.0p-16 +
                       (double(nk) / 16 + 16) * 0x1.0p-22 + (16 + 3 * std::ceil(double(nk) / 256)) * kU)
                : ref_head.bound[size_t(i)];
        if (poisoned || !std::isfinite(ref) ? !std::isnan(got) : !(std::fabs(got - ref) <= bound)) {
          why = fmt::format("hd {} pos {} head {} [{}]: {} vs {}", hd, pos[size_t(r)], h, i, got, ref);
          break;
        }
      }
    }
    if (why.empty()) {  // at the row's own key count: within one chunk, a block of its own
      run(dq + r * qs, 1, dpos + r, dseq + r, pos[size_t(r)] + 1);
      cuda::copy_to_host(alone.data(), dout, alone.size() * 4);
      if (first_bit_difference(alone.data(), out.data() + r * nh * hd, alone.size()) >= 0)
        why = fmt::format("hd {}: row at pos {} differs when computed alone", hd, pos[size_t(r)]);
    }
  }
  for (void* p :
       {static_cast<void*>(dpool), static_cast<void*>(dq), static_cast<void*>(dtable), static_cast<void*>(dpos),
        static_cast<void*>(dseq), static_cast<void*>(dout), static_cast<void*>(dpart)})
    cuda::device_free(p);
  return why;
}

}  // namespace

std::string check_cuda_attention() {
  std::mt19937 rng(23);
  const std::vector<int32_t> pos = {0, 5, 1999, 300, 77}, seq = {0, 0, 1, 1, 0};
  if (auto why = check_case(64, 9, 3, rng, false, pos, seq); !why.empty()) return why;
  return check_case(128, 32, 8, rng, false, pos, seq);
}

// Decode-like rows of two sequences, then a prefill chunk (37 consecutive positions) with another sequence's rows
// inside and after it: every row must equal the row computed alone.
std::string check_cuda_attention_mma() {
  try {  // pages that split a 16-key group are refused before any launch
    cuda::attention_mma(nullptr, 0, 0, nullptr, nullptr, cuda::PagedKv{nullptr, 0, 0, 8, 1024, nullptr, 1}, 32, 8, 128,
                        1.0f, nullptr);
    return "KV pages of 8 tokens were not refused";
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()).find("multiple of 16 tokens, not 8") == std::string::npos)
      return std::string("KV pages of 8 tokens refused for another reason: ") + e.what();
  }
  std::mt19937 rng(29);
  std::vector<int32_t> pos = {0, 5, 1999, 300, 77}, seq = {0, 0, 1, 1, 0};
  if (auto why = check_case(64, 9, 3, rng, true, pos, seq); !why.empty()) return why;
  if (auto why = check_case(128, 32, 8, rng, true, pos, seq); !why.empty()) return why;
  // Decode rows within one chunk (their keys pulled into L2 before the wait, a block a row), with a NaN value among
  // them and one past bf16's range; the build must run.
  const std::vector<int32_t> near = {0, 5, 200, 30, 77};
  const int64_t one_before = cuda::attention_one_row_launches();
  if (auto why = check_case(128, 32, 8, rng, true, near, seq); !why.empty()) return why + " (one chunk)";
  if (auto why = check_case(64, 9, 3, rng, true, near, seq, 3); !why.empty()) return why + " (one chunk, NaN)";
  if (auto why = check_case(128, 32, 8, rng, true, near, seq, 30, 3.4e38f); !why.empty())
    return why + " (one chunk, past bf16)";
  if (cuda::attention_one_row_launches() == one_before) return "the one-row build never ran on one-chunk rows";
  // More one-chunk rows than a wave of blocks a row: by shape the tiles run, forced the one-row build must match them.
  std::vector<int32_t> many, many_seq;
  for (int32_t p = 100; p < 137; ++p) many.push_back(p), many_seq.push_back(0);
  for (int32_t p : {3, 60, 200}) many.push_back(p), many_seq.push_back(1);
  if (auto why = check_case(128, 32, 8, rng, true, many, many_seq); !why.empty()) return why + " (one chunk, 40 rows)";
  pos.clear(), seq.clear();
  for (int32_t p = 500; p < 537; ++p) pos.push_back(p), seq.push_back(0);
  pos.insert(pos.begin() + 9, 40), seq.insert(seq.begin() + 9, 1);
  for (int32_t p : {10, 11, 12}) pos.push_back(p), seq.push_back(1);
  if (auto why = check_case(64, 9, 3, rng, true, pos, seq); !why.empty()) return why;
  if (auto why = check_case(128, 32, 8, rng, true, pos, seq); !why.empty()) return why;
  if (auto why = check_case(128, 32, 8, rng, true, pos, seq, 520); !why.empty()) return why;           // a NaN value
  if (auto why = check_case(128, 32, 8, rng, true, pos, seq, 520, 3.4e38f); !why.empty()) return why;  // past bf16
  if (auto why = check_case(64, 4, 4, rng, true, pos, seq); !why.empty()) return why;    // one head per KV head
  if (auto why = check_case(128, 16, 1, rng, true, pos, seq); !why.empty()) return why;  // sixteen
  // The engine's 32-token pages and 48-token ones: 16-key steps that start inside a page.
  if (auto why = check_case(128, 32, 8, rng, true, pos, seq, -1, NAN, 32); !why.empty()) return why;
  return check_case(64, 9, 3, rng, true, pos, seq, -1, NAN, 48);
}

}  // namespace tf::contract
