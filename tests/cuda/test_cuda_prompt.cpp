// Hopper prompt rows, images or not: chunk-invariant, not decode's bits, mixed rounds equal solo rows.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "../unit/gguf_builder.h"
#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/cuda_gemv.h"
#include "backend/cuda/cuda_mma.h"
#include "backend/cuda/cuda_ops.h"
#include "base/error.h"
#include "base/scalar.h"
#include "engine/direct.h"
#include "engine/kv_cache.h"
#include "io/gguf.h"
#include "model/llama/llama_cuda.h"

namespace tf {
namespace {

constexpr int64_t kE = 256, kH = 4, kKv = 2, kD = 64, kF = 512, kV = 1024, kL = 2;

// Random valid blocks: Q4_K (type 12) with d and dmin small, Q6_K (14) with d small, F32 norms of one.
std::string write_model(int64_t n_ff = kF, const char* name = "prompt_q4km.gguf") {
  struct T {
    std::string name;
    int64_t n_in, n_out;
    uint32_t type;
  };
  std::vector<T> ts = {
      {"token_embd.weight", kE, kV, 12}, {"output_norm.weight", kE, 1, 0}, {"output.weight", kE, kV, 14}};
  for (int l = 0; l < kL; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    for (const T& t : std::vector<T>{{b + "attn_norm.weight", kE, 1, 0},
                                     {b + "ffn_norm.weight", kE, 1, 0},
                                     {b + "attn_q.weight", kE, kH * kD, 12},
                                     {b + "attn_k.weight", kE, kKv * kD, 12},
                                     {b + "attn_v.weight", kE, kKv * kD, 14},
                                     {b + "attn_output.weight", kH * kD, kE, 12},
                                     {b + "ffn_gate.weight", kE, n_ff, 12},
                                     {b + "ffn_up.weight", kE, n_ff, 12},
                                     {b + "ffn_down.weight", n_ff, kE, 14}})
      ts.push_back(t);
  }
  auto bytes = [](const T& t) {
    return size_t(t.n_out) * size_t(t.type == 0 ? t.n_in * 4 : t.n_in / 256 * (t.type == 12 ? 144 : 210));
  };
  GgufBuilder g;
  g.header(ts.size(), 10);
  g.kv_string("general.architecture", "llama");
  g.kv_u32("llama.embedding_length", kE);
  g.kv_u32("llama.block_count", kL);
  g.kv_u32("llama.feed_forward_length", uint32_t(n_ff));
  g.kv_u32("llama.attention.head_count", kH);
  g.kv_u32("llama.attention.head_count_kv", kKv);
  g.kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  g.kv_u32("llama.vocab_size", kV);
  g.kv_u32("llama.context_length", 1024);
  g.kv_u32("general.alignment", 32);
  uint64_t off = 0;
  for (const T& t : ts) {
    const std::vector<uint64_t> ne = t.type == 0 ? std::vector<uint64_t>{uint64_t(t.n_in)}
                                                 : std::vector<uint64_t>{uint64_t(t.n_in), uint64_t(t.n_out)};
    g.tensor(t.name, ne, t.type, off);
    off = (off + bytes(t) + 31) / 32 * 32;
  }
  g.align();
  std::mt19937 rng(5);
  auto put16 = [&](size_t at, float v) {
    const uint16_t h = f32_to_f16(v);
    g.b[at] = uint8_t(h), g.b[at + 1] = uint8_t(h >> 8);
  };
  for (const T& t : ts) {
    const size_t at = g.b.size(), n = bytes(t);
    if (t.type == 0) {
      for (int64_t i = 0; i < t.n_in; ++i) g.put<float>(1.0f);
    } else {
      for (size_t i = 0; i < n; ++i) g.b.push_back(uint8_t(rng()));
      const size_t blk = t.type == 12 ? 144 : 210;
      for (size_t b = at; b < at + n; b += blk) {
        if (t.type == 12)
          put16(b, 3e-3f), put16(b + 2, 1.5e-3f);
        else
          put16(b + 208, 4e-4f);
      }
    }
    g.align();
  }
  return g.write(name);
}

std::vector<float> feed(Model& m, const std::vector<int32_t>& ids, int64_t chunk, bool prompt) {
  DirectSequence seq(m, int64_t(ids.size()));
  std::vector<float> out(ids.size() * size_t(kV));
  for (size_t p = 0; p < ids.size(); p += size_t(chunk))
    seq.feed(ids.data() + p, std::min<int64_t>(chunk, int64_t(ids.size() - p)), out.data() + p * kV, true, prompt);
  return out;
}

TEST(CudaPromptRows, ChunkedPromptsEqualWholeOnesAndMixedRoundsEqualSoloRows) {
  if (!cuda::mma_wgmma_device()) GTEST_SKIP() << "the prompt products run on compute capability 9.0 only";
  LlamaCudaModel m(std::make_shared<GgufFile>(write_model()));
  ASSERT_TRUE(m.prompt_arithmetic_differs());
  std::vector<int32_t> ids(40);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 37 + 11) % kV);
  const std::vector<float> whole = feed(m, ids, 40, true), chunked = feed(m, ids, 7, true);
  EXPECT_EQ(std::memcmp(whole.data(), chunked.data(), whole.size() * 4), 0) << "prompt logits depend on the chunks";
  const std::vector<float> decode = feed(m, ids, 40, false);
  EXPECT_NE(std::memcmp(whole.data(), decode.data(), whole.size() * 4), 0) << "prompt rows took the decode products";
  // One forward: sequence A's first 9 prompt rows, then sequence B's decode row at position 5 (run first, mapped back).
  KvCache kv(32, 16, 0);
  m.bind_kv(32, 16);
  KvLease a = *kv.acquire({}, 64), b = *kv.acquire({}, 64), c = *kv.acquire({}, 64);
  std::vector<float> scratch(kV);
  for (const KvLease* l : {&b, &c}) {  // B's prefix, and a copy of it for B's row alone
    std::vector<BatchRow> pre;
    for (int32_t i = 0; i < 5; ++i) pre.push_back({&l->pages, ids[size_t(20 + i)], i, false, true});
    m.forward(pre, scratch.data());
  }
  std::vector<BatchRow> mixed;
  for (int32_t i = 0; i < 9; ++i) mixed.push_back({&a.pages, ids[size_t(i)], i, true, true});
  mixed.push_back({&b.pages, ids[25], 5, true, false});
  std::vector<float> got(10 * size_t(kV));
  m.forward(mixed, got.data());
  for (size_t r = 0; r < 9; ++r)
    EXPECT_EQ(std::memcmp(whole.data() + r * kV, got.data() + r * kV, kV * 4), 0) << "prompt row " << r;
  std::vector<BatchRow> solo{{&c.pages, ids[25], 5, true, false}};
  std::vector<float> alone(kV);
  m.forward(solo, alone.data());
  EXPECT_EQ(std::memcmp(alone.data(), got.data() + 9 * size_t(kV), kV * 4), 0) << "the decode row of the mixed round";
  // The same round sampled on the device: candidates and full logits rows in row order too (it rewrites the same KV).
  std::vector<RowSampling> sampling(10);
  std::vector<RowCandidates> cand;
  m.forward_sample(mixed, sampling, cand);
  ASSERT_EQ(cand.size(), 10u);
  for (size_t r = 0; r < 10; ++r) {
    const float* row = got.data() + r * kV;
    EXPECT_EQ(cand[r].greedy, int32_t(std::max_element(row, row + kV) - row)) << "candidates of row " << r;
    m.last_logits_row(int64_t(r), alone.data());
    EXPECT_EQ(std::memcmp(alone.data(), row, kV * 4), 0) << "last_logits_row " << r;
  }
}

// Prompt attention converts a round's keys once a layer (one full-context sequence's worth of slots, whole pairs of
// 32-key tiles a sequence); a round that needs more slots converts in each block. Either way each row has its bits
// alone.
TEST(CudaPromptRows, RoundsOfSeveralPromptsEqualEachAloneWithKeysConvertedOnceOrInEachBlock) {
  if (!cuda::mma_wgmma_device()) GTEST_SKIP() << "the prompt products run on compute capability 9.0 only";
  LlamaCudaModel m(std::make_shared<GgufFile>(write_model()));
  std::vector<int32_t> ids_a(40), ids_b(23), ones(17);
  for (size_t i = 0; i < ids_a.size(); ++i) ids_a[i] = int32_t((i * 37 + 11) % kV);
  for (size_t i = 0; i < ids_b.size(); ++i) ids_b[i] = int32_t((i * 53 + 7) % kV);
  for (size_t i = 0; i < ones.size(); ++i) ones[i] = int32_t((i * 29 + 3) % kV);
  const std::vector<float> alone_a = feed(m, ids_a, 40, true), alone_b = feed(m, ids_b, 23, true);
  std::vector<std::vector<float>> alone_one;
  for (int32_t id : ones) alone_one.push_back(feed(m, {id}, 1, true));
  // A pool of 512 tokens: 512 slots. A (40 keys) and B (23) take a 64-key pair each; seventeen one-token prompts take
  // 17 x 64.
  KvCache kv(32, 16, 0);
  m.bind_kv(32, 16);
  KvLease a = *kv.acquire({}, 48), b = *kv.acquire({}, 32);
  std::vector<BatchRow> two;
  for (int32_t i = 0; i < 23; ++i) two.push_back({&b.pages, ids_b[size_t(i)], i, true, true});
  for (int32_t i = 0; i < 40; ++i) two.push_back({&a.pages, ids_a[size_t(i)], i, true, true});
  std::vector<float> got(63 * size_t(kV));
  const int64_t conv0 = cuda::attention_prompt_key_launches(), rope0 = cuda::rope_store_row_launches();
  m.forward(two, got.data());
  EXPECT_EQ(cuda::attention_prompt_key_launches() - conv0, kL) << "128 slots fit the scratch: keys converted once";
  EXPECT_EQ(cuda::rope_store_row_launches() - rope0, kL) << "63 prompt rows: RoPE and the KV store a block a row";
  EXPECT_EQ(std::memcmp(alone_b.data(), got.data(), 23 * size_t(kV) * 4), 0) << "B's rows beside A's";
  EXPECT_EQ(std::memcmp(alone_a.data(), got.data() + 23 * size_t(kV), 40 * size_t(kV) * 4), 0) << "A's rows beside B's";
  std::vector<KvLease> leases;
  for (size_t i = 0; i < ones.size(); ++i) leases.push_back(*kv.acquire({}, 16));
  std::vector<BatchRow> many;
  for (size_t i = 0; i < ones.size(); ++i) many.push_back({&leases[i].pages, ones[i], 0, true, true});
  got.assign(ones.size() * size_t(kV), 0.0f);
  const int64_t conv1 = cuda::attention_prompt_key_launches();
  m.forward(many, got.data());
  EXPECT_EQ(cuda::attention_prompt_key_launches(), conv1) << "1088 slots do not fit: each block converts its own";
  for (size_t i = 0; i < ones.size(); ++i)
    EXPECT_EQ(std::memcmp(alone_one[i].data(), got.data() + i * size_t(kV), kV * 4), 0) << "one-token prompt " << i;
}

TEST(CudaPromptRows, ImagesKeepTheDecodingBitsAndAreGivenBackFirstForTheKvPool) {
  if (!cuda::mma_wgmma_device()) GTEST_SKIP() << "the prompt products run on compute capability 9.0 only";
  if (cuda::prompt_image_mode() != -1) GTEST_SKIP() << "TF_CUDA_PROMPT_IMAGE is set: images are not the default's";
  LlamaCudaModel m(std::make_shared<GgufFile>(write_model()));
  const size_t img = m.prompt_image_bytes();
  ASSERT_GT(img, size_t(1) << 20) << m.memory_note();
  EXPECT_NE(m.memory_note().find("GiB of fp16 weights for prompt products"), std::string::npos) << m.memory_note();
  std::vector<int32_t> ids(40);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 53 + 7) % kV);
  const int64_t fused = cuda::prompt_fused_stages();
  const std::vector<float> with = feed(m, ids, 40, true);  // leaves a pool of 2 pages of 32 tokens bound
  // A layer's three stages make their x themselves: RMSNorm before Q|K|V and gate|up, SwiGLU before down.
  EXPECT_EQ(cuda::prompt_fused_stages() - fused, 3 * kL) << "prompt rows' stages did not make their x themselves";
  size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  const size_t avail = free + m.kv_pool_bytes(2, 32), margin = size_t(1) << 28;
  const int64_t big = 1 << 20, page = 16 * m.kv_floats_per_token() * 4;
  const size_t fixed = m.kv_pool_bytes(big, 16) - size_t(big * page);  // the partials, the same for any large pool
  try {  // refused naming the settings to lower; not the switch, since giving the unasked images back would not do
    m.bind_kv(int64_t(2 * avail) / page, 16);
    ADD_FAILURE() << "a pool twice the free memory was bound";
  } catch (const Error& e) {
    const std::string why = e.what();
    EXPECT_NE(why.find("lower --parallel, --context or --prompt-cache-gib"), std::string::npos) << why;
    EXPECT_EQ(why.find("TF_CUDA_PROMPT_IMAGE"), std::string::npos) << why;
  }
  EXPECT_EQ(m.prompt_image_bytes(), img) << "images were given back for a pool they could not make fit";
  // A pool that fits only without them: the images go, the pool is bound.
  m.bind_kv(int64_t(avail + img / 2 - margin - fixed) / page, 16);
  EXPECT_EQ(m.prompt_image_bytes(), 0u);
  EXPECT_NE(m.memory_note().find("given back for the KV pool"), std::string::npos) << m.memory_note();
  const std::vector<float> without = feed(m, ids, 40, true);
  EXPECT_EQ(std::memcmp(with.data(), without.data(), with.size() * 4), 0) << "the images changed prompt logits";
}

// Wide images (Q|K|V stacked) give the prompt logits of 128-output ones, whole and chunked, on partial blocks.
TEST(CudaPromptRows, WideImagesGiveTheBitsOfNarrowOnes) {
  if (!cuda::mma_wgmma_device()) GTEST_SKIP() << "the prompt products run on compute capability 9.0 only";
  if (cuda::prompt_image_mode() == 0) GTEST_SKIP() << "TF_CUDA_PROMPT_IMAGE=0: no images";
  struct Keep {
    int before = cuda::set_prompt_image_width(-1);
    ~Keep() { cuda::set_prompt_image_width(before); }
  } keep;
  auto file = std::make_shared<GgufFile>(write_model());
  std::vector<int32_t> ids(300);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 61 + 5) % kV);
  std::vector<float> narrow;
  for (int width : {128, 192, 224, 256}) {
    cuda::set_prompt_image_width(width);
    LlamaCudaModel m(file);
    ASSERT_GT(m.prompt_image_bytes(), 0u) << width << ": " << m.memory_note();
    EXPECT_EQ(m.stacked_qkv_layers(), width == 128 ? 0 : kL) << width << ": Q|K|V stacked in the wide images";
    const std::vector<float> whole = feed(m, ids, 300, true), chunked = feed(m, ids, 97, true);
    EXPECT_EQ(std::memcmp(whole.data(), chunked.data(), whole.size() * 4), 0) << width << ": chunks of 97";
    if (narrow.empty())
      narrow = whole;
    else
      EXPECT_EQ(std::memcmp(whole.data(), narrow.data(), whole.size() * 4), 0) << width << " against 128";
  }
}

size_t free_now() {
  size_t free = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  return free;
}

constexpr size_t kMiB = size_t(1) << 20;

// Cases that set TF_CUDA_PROMPT_IMAGE's mode themselves, on a model with 76 MiB of images; the mode is unset after.
class PromptImageModes : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::mma_wgmma_device()) GTEST_SKIP() << "the prompt products run on compute capability 9.0 only";
    if (cuda::prompt_image_mode() != -1) GTEST_SKIP() << "TF_CUDA_PROMPT_IMAGE is set: images are not the default's";
    file = std::make_shared<GgufFile>(write_model(25600, "prompt_images_76mib.gguf"));
  }
  void TearDown() override { cuda::set_prompt_image_mode(-1); }
  std::shared_ptr<GgufFile> file;
};

TEST_F(PromptImageModes, ImagesTakeAQuarterOfFreeMemoryAtMostAndAForcedOneThatCannotFitIsRefusedWithNothingLost) {
  cuda::set_prompt_image_mode(0);
  { LlamaCudaModel warm(file); }  // the modules a load uses are loaded now, not inside a measurement
  size_t weights = free_now(), img = 0;
  {
    LlamaCudaModel m(file);
    weights -= free_now();  // what a load without images takes
  }
  cuda::set_prompt_image_mode(-1);
  {
    LlamaCudaModel m(file);
    img = m.prompt_image_bytes();
  }
  // The cases need 4 img > 256 MiB (a quarter case above the weights' reserve) and 4 img < img + 256 MiB, with room.
  ASSERT_GT(4 * img, 264 * kMiB);
  ASSERT_LT(3 * img, 248 * kMiB);
  ASSERT_GT(weights, 8 * kMiB) << "a lost load would not show beside the 1 MiB the check allows";
  // Loads with `after` bytes left free once the weights are in, the rest held here; returns the refusal, if any.
  auto load = [&](size_t after, int mode, std::string& note, size_t& held) -> std::string {
    cuda::set_prompt_image_mode(mode);
    note.clear(), held = 0;
    void* hog = nullptr;
    const size_t f = free_now();
    if (f <= weights + after || cudaMalloc(&hog, f - weights - after) != cudaSuccess) {
      cudaGetLastError();  // so no later launch check reports it
      return std::string("could not hold the device memory back");
    }
    const size_t before = free_now();
    std::string why;
    try {
      LlamaCudaModel m(file);
      note = m.memory_note(), held = m.prompt_image_bytes();
    } catch (const std::exception& e) {
      why = e.what();
    }
    EXPECT_GE(free_now() + kMiB, before) << "device memory lost by a load (" << why << ")";
    cudaFree(hog);
    return why;
  };
  std::string note;
  size_t held = 0;
  // Unasked images wait for a quarter of what is free, then for their size and 256 MiB beside it.
  const size_t quarter = (256 * kMiB + 4 * img) / 2, reserve = (4 * img + img + 256 * kMiB) / 2;
  EXPECT_EQ(load(quarter, -1, note, held), "");
  EXPECT_EQ(held, 0u);
  EXPECT_NE(note.find("more than a quarter"), std::string::npos) << note;
  EXPECT_EQ(load(reserve, -1, note, held), "");
  EXPECT_EQ(held, 0u);
  EXPECT_NE(note.find("GiB free"), std::string::npos) << note;
  EXPECT_EQ(note.find("quarter"), std::string::npos) << note;
  EXPECT_EQ(load(img + 320 * kMiB, -1, note, held), "");
  EXPECT_EQ(held, img) << note;
  // Asked for with TF_CUDA_PROMPT_IMAGE=1, images that cannot have their 256 MiB beside them refuse the load by name.
  for (size_t after : {quarter, reserve}) {
    const std::string why = load(after, 1, note, held);
    EXPECT_NE(why.find("TF_CUDA_PROMPT_IMAGE=1: the prompt images need"), std::string::npos) << why;
  }
  EXPECT_EQ(load(img + 320 * kMiB, 1, note, held), "");
  EXPECT_EQ(held, img);
  // Asked-for images are kept when the KV pool cannot be had, and its refusal names the switch that holds them.
  cuda::set_prompt_image_mode(1);
  LlamaCudaModel m(file);
  try {
    m.bind_kv(int64_t(2 * free_now()) / (16 * m.kv_floats_per_token() * 4), 16);
    ADD_FAILURE() << "a pool twice the free memory was bound";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("or TF_CUDA_PROMPT_IMAGE=0 (prompt images hold"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(m.prompt_image_bytes(), img) << "images asked for were given back";
}

TEST_F(PromptImageModes, RoundScratchTakesUnaskedImagesBackFirstAndAskedOnesNameTheSwitchWhenItCannotBeHad) {
  constexpr int64_t kRows = 1024;
  // What a round of kRows rows takes beside the pool, measured on a load without images after one like it.
  cuda::set_prompt_image_mode(0);
  size_t scratch = 0;
  for (int pass = 0; pass < 2; ++pass) {
    LlamaCudaModel twin(file);
    twin.bind_kv(4, 16);
    const size_t before = free_now();
    twin.reserve_rounds(kRows, 1, 64);
    scratch = before - free_now();
  }
  // Free memory half an image short of that scratch: only the images can make the difference.
  auto short_of_scratch = [&](LlamaCudaModel& m, size_t img) {
    m.bind_kv(4, 16);
    void* hog = nullptr;
    const size_t f = free_now(), leave = scratch - img / 2;
    if (f <= leave || cudaMalloc(&hog, f - leave) != cudaSuccess) {
      cudaGetLastError();
      return std::string("could not hold the device memory back");
    }
    std::string why;
    try {
      m.reserve_rounds(kRows, 1, 64);
    } catch (const std::exception& e) {
      why = e.what();
    }
    cudaFree(hog);
    return why;
  };
  cuda::set_prompt_image_mode(-1);
  {
    LlamaCudaModel m(file);
    const size_t img = m.prompt_image_bytes();
    ASSERT_GT(img, 0u) << m.memory_note();
    ASSERT_GT(scratch, img / 2 + 16 * kMiB) << "the scratch must exceed the half image held back";
    EXPECT_EQ(short_of_scratch(m, img), "");
    EXPECT_EQ(m.prompt_image_bytes(), 0u);
    EXPECT_NE(m.memory_note().find("given back for the round scratch"), std::string::npos) << m.memory_note();
  }
  cuda::set_prompt_image_mode(1);
  LlamaCudaModel m(file);
  const size_t img = m.prompt_image_bytes();
  const std::string why = short_of_scratch(m, img);
  EXPECT_NE(why.find("lower --parallel, --chunk, --context or --prompt-cache-gib, or TF_CUDA_PROMPT_IMAGE=0 (prompt "
                     "images hold"),
            std::string::npos)
      << why;
  EXPECT_EQ(m.prompt_image_bytes(), img) << "images asked for were given back";
}

}  // namespace
}  // namespace tf

int main(int argc, char** argv) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
