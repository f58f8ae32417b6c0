// The llama path on CUDA against the CPU backend and against itself: greedy agreement on SmolLM2, rows that do not
// depend on their batch, device candidates that sample exactly as full logits do, and rounds refused at startup
// that are too large. Exits 77 without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "../unit/gguf_builder.h"
#include "../unit/model_rows_check.h"
#include "backend/cpu/ops.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_gemv.h"
#include "backend/cuda/cuda_sample.h"
#include "base/error.h"
#include "engine/direct.h"
#include "engine/loaded_model.h"
#include "engine/sampler.h"
#include "io/gguf.h"
#include "model/llama/llama_cuda.h"

namespace tf {
namespace {

std::string model_path() {
  const char* env = std::getenv("TF_MODEL");
  return env ? env : std::string(TF_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// The foundation issue's prompts (tests/e2e/test_llama_oracle.py).
const std::vector<std::string> kPrompts = {
    "The old lighthouse keeper climbed the spiral stairs every evening, counting each step as the waves crashed "
    "against the rocks below.",
    "def merge_sorted(a, b):\n    out = []\n    i = j = 0\n    while i < len(a) and j < len(b):\n",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "Prices: 3.14, 27.5, 1024, 65536 and 99.99; the sum of 1234 and 5678 is",
    "Bonjour, comment ça va? Guten Morgen! ¿Dónde está la biblioteca? 今日はいい天気ですね。"};

struct Greedy {
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> logits;  // per generated step
};

Greedy greedy(Model& m, const std::vector<int32_t>& prompt, int n) {
  const int64_t V = m.info().n_vocab;
  DirectSequence seq(m, int64_t(prompt.size()) + n + 1);
  std::vector<float> lg(static_cast<size_t>(V));
  seq.feed(prompt.data(), int64_t(prompt.size()), lg.data(), false, true);
  Greedy g;
  for (int i = 0; i < n; ++i) {
    g.logits.push_back(lg);
    int32_t t = cpu::argmax(lg.data(), V);
    g.ids.push_back(t);
    seq.feed(&t, 1, lg.data(), true, false);
  }
  return g;
}

TEST(CudaModel, GreedyMatchesCpuForAtLeast32Tokens) {
  ThreadPool pool(0);
  LoadedModel cpu = load_model(model_path(), pool, "", "cpu");
  LoadedModel gpu = load_model(model_path(), pool, "", "cuda");
  ASSERT_EQ(gpu.backend.name, "cuda");
  const int n = 64;
  for (const auto& text : kPrompts) {
    auto ids = cpu.tokenizer->encode(text);
    Greedy a = greedy(*cpu.model, ids, n), b = greedy(*gpu.model, ids, n);
    int k = 0;
    while (k < n && a.ids[size_t(k)] == b.ids[size_t(k)]) ++k;
    std::string where = "all " + std::to_string(n) + " equal";
    if (k < n) {
      const auto& l = a.logits[size_t(k)];
      auto top = cpu::topk(l.data(), int64_t(l.size()), 2);
      where = "first difference at generated token " + std::to_string(k) + ", CPU top-2 margin " +
              std::to_string(l[size_t(top[0])] - l[size_t(top[1])]);
    }
    std::string shown = text.substr(0, 40);
    std::replace(shown.begin(), shown.end(), '\n', ' ');
    std::printf("GREEDY cpu-vs-cuda %-40s %s\n", shown.c_str(), where.c_str());
    EXPECT_GE(k, 32) << where;
  }
}

TEST(CudaModel, GraphRoundsEqualRoundsLaunchedOneByOne) {
  // Replayed rounds, with and without the L2 pulls on a side branch (TF_CUDA_PREFETCH; off by default beside the
  // products' early weight loads): no logit may move by a bit. SmolLM2's layers are small, so the pulls are the
  // whole-layer ones; the tile-head pulls run in the 8B benchmarks. A model per mode: graphs keep the mode they were
  // captured under.
  struct Keep {
    ~Keep() { cuda::set_prefetch_mode(-1); }
  } keep;
  ThreadPool pool(0);
  for (int pull : {1, 0}) {
    cuda::set_prefetch_mode(pull);
    LoadedModel m = load_model(model_path(), pool, "", "cuda");
    auto ids = m.tokenizer->encode(kPrompts[1]);
    m.model->set_graphs(true);
    const Greedy a = greedy(*m.model, ids, 24);
    m.model->set_graphs(false);
    const Greedy b = greedy(*m.model, ids, 24);
    ASSERT_EQ(a.ids, b.ids) << "pulls " << pull;
    for (size_t i = 0; i < a.logits.size(); ++i)
      EXPECT_EQ(std::memcmp(a.logits[i].data(), b.logits[i].data(), a.logits[i].size() * sizeof(float)), 0)
          << "pulls " << pull << ", generated token " << i;
  }
}

TEST(CudaModel, BatchedRowsEqualSoloRowsBitForBit) {
  ThreadPool pool(0);
  LoadedModel m = load_model(model_path(), pool, "", "cuda");
  // Pages of 16 tokens, the smallest the tensor-core attention walks (RefusesWhatItCannotRun checks 8).
  EXPECT_EQ(batched_rows_differ(
                *m.model, {{1, 9690, 198, 2683, 359, 253, 5356}, {504, 3458, 282, 4649, 314}, {22, 23, 24}, {7}}, 16),
            "");
}

TEST(CudaModel, CandidatesSampleAsFullLogits) {
  ThreadPool pool(0);
  LoadedModel m = load_model(model_path(), pool, "", "cuda");
  ASSERT_TRUE(m.model->device_sampling());
  const int64_t V = m.model->info().n_vocab;
  auto ids = m.tokenizer->encode(kPrompts[0]);
  KvCache kv(16, 32, 0);
  m.model->bind_kv(16, 32);
  KvLease lease = *kv.acquire({}, 256);
  std::vector<BatchRow> rows;
  for (size_t i = 0; i < ids.size(); ++i) rows.push_back({&lease.pages, ids[i], int32_t(i), true});
  std::vector<float> full(rows.size() * size_t(V));
  m.model->forward(rows, full.data());
  const std::vector<SamplingParams> params = {{0.0, 0, 1.0, 0.0, 1},
                                              {0.8, 0, 1.0, 0.0, 7},
                                              {1.3, 40, 0.9, 0.0, 9},
                                              {0.7, 0, 1.0, 0.0, 11},
                                              {1.0, 20, 1.0, 0.05, 13}};
  for (const auto& p : params) {
    std::vector<RowSampling> sp;
    for (size_t i = 0; i < rows.size(); ++i) sp.push_back({p.temperature, p.seed, int64_t(i) + 1});
    std::vector<RowCandidates> cand;
    m.model->forward_sample(rows, sp, cand);
    ASSERT_EQ(cand.size(), rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const float* l = full.data() + i * size_t(V);
      const auto top = cpu::topk(l, V, 256);
      ASSERT_EQ(cand[i].top.size(), top.size());
      for (size_t j = 0; j < top.size(); ++j) ASSERT_EQ(cand[i].top[j].second, top[j]) << "row " << i << " rank " << j;
      EXPECT_EQ(sample_candidates(cand[i], p, int64_t(i) + 1), sample_token(l, V, p, int64_t(i) + 1))
          << "row " << i << " temperature " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p;
    }
  }
  // Greedy rows without logprobs take the argmax alone, beside rows that take candidates.
  std::vector<RowSampling> mixed;
  for (size_t i = 0; i < rows.size(); ++i) mixed.push_back({i % 2 ? 0.8 : 0.0, 7, int64_t(i) + 1, i % 2 == 1});
  std::vector<RowCandidates> cand;
  m.model->forward_sample(rows, mixed, cand);
  ASSERT_EQ(cand.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const float* l = full.data() + i * size_t(V);
    const SamplingParams p{mixed[i].temperature, 0, 1.0, 0.0, 7};
    EXPECT_EQ(cand[i].top.size(), i % 2 ? size_t(256) : size_t(0)) << "row " << i;
    EXPECT_EQ(sample_candidates(cand[i], p, int64_t(i) + 1), sample_token(l, V, p, int64_t(i) + 1)) << "row " << i;
  }
  // A row at a temperature asking for no candidates would be drawn from its argmax: refused.
  mixed[0].temperature = 0.5;
  EXPECT_THROW(m.model->forward_sample(rows, mixed, cand), Error);
}

TEST(CudaModel, RefusesWhatItCannotRun) {
  ThreadPool pool(0);
  LoadedModel m = load_model(model_path(), pool, "", "cuda");
  EXPECT_THROW(check_context(m, kCudaMaxContext + 1), Error);
  try {  // far more KV than any device holds: refused naming the pool and the settings that size it
    m.model->bind_kv(int64_t(1) << 40, 32);
    ADD_FAILURE() << "a KV pool larger than the device was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("KV pool"), std::string::npos) << what;
    EXPECT_NE(what.find("--parallel"), std::string::npos) << what;
  }
  try {  // pages the attention cannot take in 16-key steps: refused naming the page size, before any allocation
    m.model->bind_kv(64, 8);
    ADD_FAILURE() << "KV pages of 8 tokens were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV pages of 8 tokens"), std::string::npos) << e.what();
  }
}

TEST(CudaModel, RefusesAVocabularyTheSamplerCannotTake) {
  // Metadata only: the vocabulary is checked before any tensor, and refused naming its size and the limit.
  GgufBuilder g;
  g.header(0, 9);
  g.kv_string("general.architecture", "llama");
  g.kv_u32("llama.embedding_length", 64);
  g.kv_u32("llama.block_count", 1);
  g.kv_u32("llama.feed_forward_length", 128);
  g.kv_u32("llama.attention.head_count", 1);
  g.kv_u32("llama.attention.head_count_kv", 1);
  g.kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  g.kv_u32("llama.vocab_size", uint32_t(cuda::kMaxSampledVocab + 1));
  g.kv_u32("general.alignment", 32);
  g.align();
  GgufFile f(g.write("big_vocab.gguf"));
  const std::string why = llama_cuda_refusal(f);
  EXPECT_NE(why.find("a vocabulary of 819201 entries"), std::string::npos) << why;
}

TEST(CudaModel, RefusesWeightsLargerThanTheFreeMemory) {
  // Another tenant leaves the 256 MiB reserve plus half the file: only weights counted at their size are refused.
  size_t free_b = 0, total_b = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  const size_t left = (size_t(256) << 20) + size_t(std::filesystem::file_size(model_path())) / 2;
  void* hog = nullptr;
  ASSERT_EQ(cudaMalloc(&hog, free_b - left), cudaSuccess);
  ThreadPool pool(0);
  try {
    load_model(model_path(), pool, "", "cuda");
    ADD_FAILURE() << "weights larger than the free device memory were accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the weights need"), std::string::npos) << what;
    EXPECT_NE(what.find("GiB free"), std::string::npos) << what;
  }
  cudaFree(hog);
  EXPECT_NO_THROW(load_model(model_path(), pool, "", "cuda"));  // the process is unharmed
}

TEST(CudaModel, RoundsTooLargeAreRefusedAtReservationAndTheModelServesOn) {
  ThreadPool pool(0);
  LoadedModel m = load_model(model_path(), pool, "", "cuda");
  auto ids = m.tokenizer->encode(kPrompts[0]);
  const Greedy before = greedy(*m.model, ids, 4);
  DirectSequence seq(*m.model, 64);  // binds the pool the reservations are made against
  auto refused = [&](int64_t rows, int64_t logit_rows, const char* says) {
    try {
      m.model->reserve_rounds(rows, logit_rows, 64);
      ADD_FAILURE() << rows << " rows were reserved";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("--chunk"), std::string::npos) << what;
      EXPECT_NE(what.find(says), std::string::npos) << what;
    }
  };
  refused(kCudaMaxRows + 1, 1, "65535");
  // Leave 64 MiB free: 4,096 rows of logits alone need 768 MiB.
  size_t free_b = 0, total_b = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  void* hog = nullptr;
  ASSERT_EQ(cudaMalloc(&hog, free_b - (size_t(64) << 20)), cudaSuccess);
  refused(4096, 4096, "could not be had");
  cudaFree(hog);
  // A forward past the grid limit is refused before any launch.
  std::vector<BatchRow> rows(size_t(kCudaMaxRows + 1), BatchRow{&seq.pages(), 1, 0, false});
  try {
    m.model->forward(rows, nullptr);
    ADD_FAILURE() << "a forward of " << rows.size() << " rows ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 65535"), std::string::npos) << e.what();
  }
  // The failed allocation left no error behind: the next rounds give the bits they gave before.
  m.model->reserve_rounds(64, 8, 64);
  const Greedy after = greedy(*m.model, ids, 4);
  ASSERT_EQ(before.ids, after.ids);
  for (size_t i = 0; i < before.logits.size(); ++i)
    EXPECT_EQ(std::memcmp(before.logits[i].data(), after.logits[i].data(), before.logits[i].size() * sizeof(float)), 0)
        << "generated token " << i;
}

}  // namespace
}  // namespace tf

int main(int argc, char** argv) {
  if (tf::cuda::device_count() == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  if (!std::filesystem::exists(tf::model_path())) {
    std::printf("SKIP: model not present: %s\n", tf::model_path().c_str());
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
