#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "engine/kv_cache.h"
#include "engine/loaded_model.h"
#include "model_rows_check.h"

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
  EXPECT_EQ(
      batched_rows_differ(*m.model, {{1, 9690, 198, 2683, 359, 253, 5356}, {504, 3458, 282, 4649, 314}, {22, 23, 24}}),
      "");
}

}  // namespace
}  // namespace tf
