#include <gtest/gtest.h>

#include <numeric>

#include "engine/drafter.h"
#include "engine/kv_cache.h"

namespace tf {
namespace {

std::vector<int32_t> seq(int n, int start = 100) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(KvCache, ReusesFullPagesOfAFinishedPromptAndKeepsTheLastTokenToCompute) {
  KvCache kv(16, 4, 1);
  auto a = seq(10);
  KvLease la = *kv.acquire(a, 12);
  EXPECT_EQ(la.cached_tokens, 0);
  EXPECT_EQ(la.pages.size(), 3u);
  kv.release(la, a, 10);  // positions 0..9 written: pages 0 and 1 are full
  EXPECT_EQ(kv.pages_cached(), 2);
  EXPECT_EQ(kv.pages_used(), 0);
  auto b = a;
  b.push_back(7);
  KvLease lb = *kv.acquire(b, 16);
  EXPECT_EQ(lb.cached_tokens, 8);
  auto exact = seq(8);  // a prompt of exactly two pages reuses only one: its last token must be computed
  KvLease lc = *kv.acquire(exact, 8);
  EXPECT_EQ(lc.cached_tokens, 4);
  EXPECT_EQ(lb.pages[0], lc.pages[0]);  // shared, read-only
}

TEST(KvCache, DifferentTokensOrParentsNeverMatch) {
  KvCache kv(16, 4, 1);
  auto a = seq(9);
  KvLease la = *kv.acquire(a, 9);
  kv.release(la, a, 9);
  auto b = a;
  b[5] = 999;  // second page differs
  EXPECT_EQ(kv.acquire(b, 9)->cached_tokens, 4);
  auto c = a;
  c[0] = 999;  // first page differs: the second page's parent no longer matches either
  EXPECT_EQ(kv.acquire(c, 9)->cached_tokens, 0);
}

TEST(KvCache, EvictsLeastRecentlyUsedAndRefusesWhenHeld) {
  KvCache kv(4, 4, 1);
  auto a = seq(9, 0), b = seq(9, 50);
  KvLease la = *kv.acquire(a, 9);
  kv.release(la, a, 9);
  KvLease lb = *kv.acquire(b, 9);
  kv.release(lb, b, 9);
  EXPECT_EQ(kv.pages_used(), 0);
  KvLease big = *kv.acquire(seq(16, 200), 16);  // needs all four pages: evicts every cached page
  EXPECT_EQ(kv.pages_cached(), 0);
  EXPECT_FALSE(kv.acquire(seq(2, 300), 2).has_value());  // every page is held
  kv.release(big, seq(16, 200), 0);
  EXPECT_EQ(kv.pages_used(), 0);
  EXPECT_TRUE(kv.acquire(seq(2, 300), 2).has_value());
}

TEST(ContextDrafter, ContinuesTheMostRecentLongestMatch) {
  ContextDrafter d;
  std::vector<int32_t> t = {1, 2, 3, 4, 5, 9, 9, 1, 2, 3, 7, 8, 1, 2, 3};
  EXPECT_EQ(d.propose({&t, 3}), (std::vector<int32_t>{7, 8, 1}));
  std::vector<int32_t> none = {1, 2, 3, 4};
  EXPECT_TRUE(d.propose({&none, 4}).empty());
  EXPECT_TRUE(d.propose({&t, 0}).empty());
}

}  // namespace
}  // namespace tf
