// Benchmark, not a test: the tensor-core attention on the Llama-3-8B shape (32/8 heads of 128), each build and the
// shape's own choice, for decode rows over a long key table and 512-row prefill chunks (and the fp16 prompt kernel).
#include <cuda_runtime.h>

#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/cuda_gemv.h"
#include "base/env_switch.h"
#include "base/error.h"
#include "bench_timer.h"

namespace {

using namespace tf;

constexpr int64_t kHeads = 32, kKvHeads = 8, kD = 128, kPage = 16, kMaxKeys = 8192, kSeqs = 128;

using cuda::upload;

}  // namespace

int main() {
  // The unforced row runs what the launcher picks, which TF_ATTN_BUILD overrides: say so in its label.
  int env = -1;
  try {
    env = tf::env_switch("TF_ATTN_BUILD", cuda::attention_builds(), "an attention build for benchmarks");
  } catch (const tf::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  const std::string unforced =
      env < 0 ? "chosen by shape" : "TF_ATTN_BUILD=" + std::to_string(env) + ": " + cuda::attention_build_name(env);
  if (cuda::device_count() == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);  // keys, values and queries
  const int64_t kv_row = kKvHeads * kD, page_floats = 2 * kPage * kv_row, max_pages = kMaxKeys / kPage;
  const int64_t n_pages = 2 * max_pages;  // sequences share pages: reads only
  std::vector<float> pool(size_t(n_pages * page_floats));
  for (auto& v : pool) v = u(rng);
  std::vector<int32_t> table(size_t(kSeqs * max_pages));
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t((int64_t(i) * 7 + 3) % n_pages);  // scattered
  float* dpool = upload(pool);
  int32_t* dtable = upload(table);
  const cuda::PagedKv kv{dpool, page_floats, 0, kPage, kv_row, dtable, max_pages};
  const int64_t max_rows = 512, qs = kHeads * kD;
  std::vector<float> q(size_t(max_rows * qs));
  for (auto& v : q) v = u(rng);
  float* dq = upload(q);
  float* dout = static_cast<float*>(cuda::device_alloc(size_t(max_rows * qs) * 4));
  const int64_t chunk_rows = 32;
  float* dpart = static_cast<float*>(cuda::device_alloc(cuda::attention_chunk_bytes(chunk_rows, kHeads, kD, kMaxKeys)));
  const float scale = 0.08838834764831845f;  // 1 / sqrt(128)
  std::printf(
      "| case | rows | keys (last row) | build | us | useful TFLOP/s |\n| --- | --- | --- | --- | --- | --- |\n");
  struct Case {
    const char* name;
    int64_t rows, seqs, first_pos;
  };
  // Decode: one row of each of `seqs` sequences at first_pos; prefill: `rows` consecutive positions of one sequence.
  const Case cases[] = {{"decode", 1, 1, 63},      {"decode", 1, 1, 255},   {"decode", 8, 8, 127},
                        {"decode", 16, 16, 127},   {"decode", 32, 32, 127}, {"decode", 64, 64, 127},
                        {"decode", 128, 128, 127}, {"decode", 1, 1, 4095},  {"decode", 1, 1, 8191},
                        {"decode", 32, 32, 1023},  {"prefill", 512, 1, 0},  {"prefill", 512, 1, 3584},
                        {"prefill", 512, 1, 7680}};
  for (const Case& c : cases) {
    std::vector<int32_t> pos(size_t(c.rows)), seq(size_t(c.rows));
    double pairs = 0;  // (row, key) pairs attended, per head
    for (int64_t r = 0; r < c.rows; ++r) {
      seq[size_t(r)] = int32_t(c.seqs == 1 ? 0 : r);
      pos[size_t(r)] = int32_t(c.seqs == 1 ? c.first_pos + r : c.first_pos);
      pairs += double(pos[size_t(r)]) + 1;
    }
    int32_t *dpos = upload(pos), *dseq = upload(seq);
    const int64_t keys = pos.back() + 1;
    const cuda::AttnChunks chunks{dpart, chunk_rows, (kMaxKeys + cuda::kAttnChunkKeys - 1) / cuda::kAttnChunkKeys, keys,
                                  c.seqs};
    for (int b = -1; b < cuda::attention_builds(); ++b) {
      if (b >= 0 && !cuda::attention_build_takes(b, keys)) continue;  // forced there, it would run another build
      cuda::attention_force_build(b);
      const float ms = time_ms(
          [&] {
            cuda::attention_mma(dq, qs, c.rows, dpos, dseq, kv, kHeads, kKvHeads, kD, scale, dout, nullptr, nullptr,
                                chunks);
          },
          20);
      const double flops = 4.0 * pairs * double(kD) * double(kHeads);  // Q K^T and P V
      std::printf("| %s | %lld | %lld | %s | %.1f | %.1f |\n", c.name, (long long)c.rows, (long long)keys,
                  b < 0 ? unforced.c_str() : cuda::attention_build_name(b), ms * 1e3, flops / (ms * 1e-3) / 1e12);
    }
    cuda::attention_force_build(-1);
    // Prompt rows take the fp16 kernel (compute capability 9.0), converting keys in each block or once a call.
    const int64_t n_seqs = c.seqs == 1 ? 1 : c.rows;
    std::vector<int32_t> key_slot(size_t(n_seqs), 0), key_count(size_t(n_seqs), 0);
    int64_t tiles = 0;
    const int64_t slots =
        cuda::prompt_key_layout(pos.data(), seq.data(), c.rows, n_seqs, key_slot.data(), key_count.data(), tiles);
    void* dkeys = c.rows > 1 && c.seqs == 1 ? cuda::device_alloc(cuda::attention_prompt_keys_bytes(slots, kKvHeads, kD))
                                            : nullptr;
    int32_t *dslot = upload(key_slot), *dcount = upload(key_count);
    const cuda::PromptKeys pk{dkeys, dslot, dcount, slots, int(n_seqs), int(tiles)};
    for (const bool conv : {false, true}) {
      if (!dkeys) break;
      const char* what = conv ? "fp16 prompt kernel, keys converted once" : "fp16 prompt kernel";
      try {
        const float ms = time_ms(
            [&] {
              cuda::attention_prompt(dq, qs, c.rows, dpos, dseq, kv, kHeads, kKvHeads, kD, scale, dout,
                                     conv ? &pk : nullptr);
            },
            20);
        std::printf("| %s | %lld | %lld | %s | %.1f | %.1f |\n", c.name, (long long)c.rows, (long long)keys, what,
                    ms * 1e3, 4.0 * pairs * double(kD) * double(kHeads) / (ms * 1e-3) / 1e12);
      } catch (const std::runtime_error& e) {
        std::printf("| %s | %lld | %lld | %s | %s | |\n", c.name, (long long)c.rows, (long long)keys, what, e.what());
      }
    }
    for (void* p : {dkeys, static_cast<void*>(dslot), static_cast<void*>(dcount)})
      if (p) cuda::device_free(p);
    cuda::device_free(dpos);
    cuda::device_free(dseq);
  }
  for (void* p : {static_cast<void*>(dpool), static_cast<void*>(dtable), static_cast<void*>(dq),
                  static_cast<void*>(dout), static_cast<void*>(dpart)})
    cuda::device_free(p);
  return 0;
}
