#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "engine/kv_cache.h"
#include "engine/loaded_model.h"

namespace tf {
namespace {

std::string model_path() {
  const char* env = std::getenv("TF_MODEL");
  return env ? env : std::string(TF_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(Families, RegistryListsLlama) {
  bool found = false;
  for (auto& f : families()) found |= f.name == "llama";
  EXPECT_TRUE(found);
  EXPECT_THROW(family_for_architecture("no-such-arch"), Error);
}

// Exactness at the logits level: rows of three sequences sharing one forward (prefill chunks and decode rows mixed)
// are bit-identical to each sequence run alone one token at a time.
TEST(ModelRows, BatchedRowsEqualSoloRowsBitForBit) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "model not present: " << model_path();
  ThreadPool pool(2);
  LoadedModel m = load_model(model_path(), pool);
  const int64_t V = m.model->info().n_vocab;
  const std::vector<std::vector<int32_t>> prompts = {{1, 9690, 198, 2683, 359, 253, 5356}, {504, 3458, 282, 4649, 314},
                                                     {22, 23, 24}};
  // Pages of 8 positions handed out in a scrambled order, so sequences interleave in the pool.
  KvCache kv(64, 8, 0);
  m.model->bind_kv(64, 8);
  std::vector<KvLease> leases;
  std::vector<BatchRow> rows;
  for (auto& p : prompts) leases.push_back(*kv.acquire({}, 16));
  for (size_t s = 0; s < prompts.size(); ++s)
    for (size_t i = 0; i < prompts[s].size(); ++i) rows.push_back({&leases[s].pages, prompts[s][i], int32_t(i), true});
  std::vector<float> batched(rows.size() * size_t(V));
  m.model->forward(rows, batched.data());
  size_t r = 0;
  for (auto& p : prompts) {
    KvLease solo = *kv.acquire({}, 16);
    std::vector<float> one(static_cast<size_t>(V));
    for (size_t i = 0; i < p.size(); ++i, ++r) {
      std::vector<BatchRow> row{{&solo.pages, p[i], int32_t(i), true}};
      m.model->forward(row, one.data());
      ASSERT_EQ(std::memcmp(one.data(), batched.data() + r * size_t(V), size_t(V) * sizeof(float)), 0)
          << "row " << r << " (position " << i << ") differs from its solo run";
    }
  }
}

}  // namespace
}  // namespace tf
