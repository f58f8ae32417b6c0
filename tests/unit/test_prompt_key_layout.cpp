// The host layout of prompt attention's converted keys (cuda_attention.h, plain C++): what the model stages and the
// kernels index, checked against slots counted by hand.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cuda/cuda_attention.h"

namespace tf {
namespace {

TEST(PromptKeyLayout, EachSequenceTakesWholeTilePairsOfItsMostKeysInOrder) {
  // Sequence 1 (rows at 40..44: 45 keys, one pair), sequence 0 (one row at 0: one pair), sequence 2 (at 95: two).
  const std::vector<int32_t> pos = {40, 41, 42, 43, 44, 0, 95}, seq = {1, 1, 1, 1, 1, 0, 2};
  std::vector<int32_t> slot(3, -1), keys(3, -1);
  int64_t tiles = -1;
  const int64_t slots = cuda::prompt_key_layout(pos.data(), seq.data(), 7, 3, slot.data(), keys.data(), tiles);
  EXPECT_EQ(keys, (std::vector<int32_t>{1, 45, 96}));
  EXPECT_EQ(slot, (std::vector<int32_t>{0, 64, 128}));
  EXPECT_EQ(slots, 256);
  EXPECT_EQ(tiles, 4);
}

TEST(PromptKeyLayout, SeventeenOneTokenPromptsTakeMoreSlotsThanTheirKeys) {
  // The model test's round past the scratch: 17 one-key sequences take 17 tile pairs, more than 1024 slots.
  std::vector<int32_t> pos(17, 0), seq(17), slot(17), keys(17);
  for (int32_t i = 0; i < 17; ++i) seq[size_t(i)] = i;
  int64_t tiles = 0;
  EXPECT_EQ(cuda::prompt_key_layout(pos.data(), seq.data(), 17, 17, slot.data(), keys.data(), tiles), 1088);
  EXPECT_EQ(tiles, 2);
  EXPECT_EQ(slot[16], 1024);
}

}  // namespace
}  // namespace tf
