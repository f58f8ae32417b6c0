#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>

#include "base/env_switch.h"
#include "base/error.h"
#include "engine/sampler.h"
#include "engine/stop_strings.h"

namespace tf {
namespace {

std::vector<float> random_logits(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, 3);
  std::vector<float> l(static_cast<size_t>(n));
  for (auto& x : l) x = nd(rng);
  return l;
}

TEST(Sampler, SameSeedAndPositionGiveTheSameToken) {
  auto l = random_logits(1, 5000);
  SamplingParams p{1.0, 0, 1.0, 0.0, 42};
  for (int64_t pos : {0, 1, 77, 4095})
    EXPECT_EQ(sample_token(l.data(), 5000, p, pos), sample_token(l.data(), 5000, p, pos));
  int differ = 0;
  for (int64_t pos = 0; pos < 50; ++pos) {
    SamplingParams q = p;
    q.seed = 43;
    differ += sample_token(l.data(), 5000, p, pos) != sample_token(l.data(), 5000, q, pos);
  }
  EXPECT_GT(differ, 10);
}

TEST(Sampler, GreedyTiesGoToTheLowerId) {
  std::vector<float> l = {1, 3, 3, 2};
  EXPECT_EQ(sample_token(l.data(), 4, SamplingParams{}, 0), 1);
}

TEST(Sampler, BatchedRowsEqualSingleRows) {
  // A row's draw depends on (seed, position, token) only: sampling rows in any order or batch gives the same ids.
  std::vector<std::vector<float>> rows;
  for (uint32_t r = 0; r < 8; ++r) rows.push_back(random_logits(100 + r, 3000));
  SamplingParams p{0.9, 50, 0.95, 0.01, 7};
  std::vector<int32_t> solo, batched(8);
  for (int r = 0; r < 8; ++r) solo.push_back(sample_token(rows[size_t(r)].data(), 3000, p, 10 + r));
  for (int r = 7; r >= 0; --r) batched[size_t(r)] = sample_token(rows[size_t(r)].data(), 3000, p, 10 + r);
  EXPECT_EQ(solo, batched);
}

TEST(Sampler, GumbelMaxFollowsTheSoftmax) {
  std::vector<float> l = {0.0f, 1.0f, 2.0f};
  std::vector<int> count(3);
  const int n = 30000;
  for (int pos = 0; pos < n; ++pos)
    count[size_t(sample_token(l.data(), 3, SamplingParams{1.0, 0, 1.0, 0.0, 9}, pos))]++;
  double z = 1 + std::exp(1.0) + std::exp(2.0);
  for (int i = 0; i < 3; ++i) {
    double p = std::exp(double(i)) / z, sd = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(count[size_t(i)], n * p, 5 * sd) << i;  // five standard deviations: fixed seed, cannot flake
  }
}

TEST(Sampler, FiltersCutTheTail) {
  std::vector<float> l = {10, 9.5f, 0, 0, 0, 0};
  for (int pos = 0; pos < 200; ++pos) {
    EXPECT_LE(sample_token(l.data(), 6, SamplingParams{1.0, 2, 1.0, 0.0, 3}, pos), 1);
    EXPECT_LE(sample_token(l.data(), 6, SamplingParams{1.0, 0, 0.9, 0.0, 3}, pos), 1);
    EXPECT_LE(sample_token(l.data(), 6, SamplingParams{1.0, 0, 1.0, 0.05, 3}, pos), 1);
    EXPECT_EQ(sample_token(l.data(), 6, SamplingParams{1.0, 1, 1.0, 0.0, 3}, pos), 0);
  }
}

TEST(Sampler, PromptSeedIsDocumentedHash) {
  // SHA-256("1,2,3|salt") first 8 bytes little-endian, top bit cleared.
  EXPECT_EQ(sampler::seed_from_prompt({1, 2, 3}, "salt"), 0x1382b70b80ce5a67ull);  // Python hashlib
  EXPECT_NE(sampler::seed_from_prompt({1, 2, 3}, "salt"), sampler::seed_from_prompt({1, 2, 4}, "salt"));
  EXPECT_LT(sampler::seed_from_prompt({5}, "x"), uint64_t(1) << 63);
}

TEST(StopStrings, HoldsBackPossiblePrefixesAndCutsAtTheStop) {
  StopMatcher m({"END", "stop here"});
  EXPECT_EQ(m.push("abc E"), "abc ");
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("X"), "ENX");
  EXPECT_EQ(m.push(" more sto"), " more ");
  EXPECT_EQ(m.push("p here and after"), "");
  EXPECT_TRUE(m.stopped());
  StopMatcher n({"END"});
  EXPECT_EQ(n.push("xxEN"), "xx");
  EXPECT_EQ(n.flush(), "EN");
  EXPECT_FALSE(n.stopped());
}

}  // namespace
}  // namespace tf

namespace tf {
namespace {

// The one-pass path (no filters) must pick what the sorted path picks: top_k = n_vocab forces the sorted path.
TEST(Sampler, OnePassEqualsSortedPath) {
  auto l = random_logits(77, 4000);
  for (int64_t pos = 0; pos < 300; ++pos) {
    SamplingParams fast{0.8, 0, 1.0, 0.0, 11};
    SamplingParams sorted{0.8, 4000, 1.0, 0.0, 11};
    ASSERT_EQ(sample_token(l.data(), 4000, fast, pos), sample_token(l.data(), 4000, sorted, pos)) << pos;
  }
}

// Candidates as a device backend reports them, built here from full logits: sampling from them must pick exactly
// what the full row picks, for greedy, the unfiltered keyed draw and filters that fit the 256 candidates.
RowCandidates candidates_of(const std::vector<float>& l, const SamplingParams& p, int64_t pos) {
  const int64_t V = int64_t(l.size());
  RowCandidates c;
  std::vector<int32_t> ids(l.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[size_t(a)] > l[size_t(b)]; });
  for (size_t i = 0; i < 256; ++i) c.top.push_back({l[size_t(ids[i])], ids[i]});
  c.greedy = ids[0];
  // The device's whole-vocabulary draw, here by the sorted path (top_k = V), not the one-pass path under test.
  c.gumbel = sample_token(l.data(), V, SamplingParams{p.temperature, V, 1.0, 0.0, p.seed}, pos);
  c.gumbel_logit = l[size_t(c.gumbel)];
  double mx = l[size_t(c.greedy)], s1 = 0, st = 0;
  for (float x : l) s1 += std::exp(double(x) - mx), st += std::exp(double(x) / p.temperature - mx / p.temperature);
  c.lse = mx + std::log(s1), c.max_t = mx / p.temperature, c.sum_t = st;
  return c;
}

TEST(Sampler, CandidatesSampleAsTheFullRow) {
  auto l = random_logits(91, 5000);
  const std::vector<SamplingParams> params = {{0.0, 0, 1.0, 0.0, 1},
                                              {0.8, 0, 1.0, 0.0, 7},
                                              {1.3, 40, 0.9, 0.0, 9},
                                              {1.0, 256, 1.0, 0.05, 13},
                                              {0.6, 5, 1.0, 0.0, 21},
                                              {0.5, 0, 0.9, 0.0, 23}};  // top_p alone: the whole vocabulary's mass
  for (const auto& p : params)
    for (int64_t pos = 0; pos < 200; ++pos) {
      const RowCandidates c = candidates_of(l, p.temperature > 0 ? p : SamplingParams{1.0, 0, 1.0, 0.0, 1}, pos);
      ASSERT_TRUE(candidates_suffice(c, p)) << "temperature " << p.temperature << " top_k " << p.top_k;
      ASSERT_EQ(sample_candidates(c, p, pos), sample_token(l.data(), 5000, p, pos))
          << "temperature " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p << " pos " << pos;
    }
}

// Filters that reach past the 256 candidates are reported, so the engine samples those rows from full logits.
TEST(Sampler, CandidatesReportWhenTheFiltersReachPastThem) {
  auto l = random_logits(92, 5000);
  const RowCandidates c = candidates_of(l, SamplingParams{1.0, 0, 1.0, 0.0, 3}, 0);
  EXPECT_FALSE(candidates_suffice(c, SamplingParams{1.0, 1000, 1.0, 0.0, 3}));    // top_k beyond the candidates
  EXPECT_FALSE(candidates_suffice(c, SamplingParams{1.0, 0, 0.99, 0.0, 3}));      // a nucleus wider than 256
  EXPECT_FALSE(candidates_suffice(c, SamplingParams{1.0, 0, 1.0, 1e-9, 3}));      // min_p admitting all of them
  EXPECT_TRUE(candidates_suffice(c, SamplingParams{1.0, 0, 0.05, 0.0, 3}));       // a cut well inside them
  EXPECT_DEATH(sample_candidates(c, SamplingParams{1.0, 1000, 1.0, 0.0, 3}, 0), "reach past");
  RowCandidates whole = c;
  whole.complete = true;
  EXPECT_TRUE(candidates_suffice(whole, SamplingParams{1.0, 1000, 1.0, 0.0, 3}));
}

// Developer switches take "0" .. "n-1" or nothing; anything else is refused by name, never silently ignored.
TEST(EnvSwitch, TakesItsValuesAndRefusesOthersByName) {
  const char* name = "TF_TEST_SWITCH_UNIT";
  unsetenv(name);
  EXPECT_EQ(env_switch(name, 3, "a test"), -1);
  setenv(name, "", 1);
  EXPECT_EQ(env_switch(name, 3, "a test"), -1);
  for (const char* v : {"0", "1", "2"}) {
    setenv(name, v, 1);
    EXPECT_EQ(env_switch(name, 3, "a test"), v[0] - '0');
  }
  for (const char* bad : {"3", "-1", "01", "1 ", "on", "x"}) {
    setenv(name, bad, 1);
    try {
      env_switch(name, 3, "a test");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), std::string(name) + "=" + bad + ": takes 0 to 2 or nothing (a test)");
    }
  }
  unsetenv(name);
}

}  // namespace
}  // namespace tf
