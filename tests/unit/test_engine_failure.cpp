// A forward that throws ends the affected requests with finish_reason "error" and the reason, and the engine goes
// on serving the next request. The largest round is reserved before the first one runs, and none exceeds it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tf {
namespace {

// A model without weights: the engine's bookkeeping only; each logits row prefers the token `best` names.
class TestModel : public Model {
 public:
  TestModel() { info_.family = "test", info_.n_vocab = 49152, info_.n_ctx_train = 4096; }
  const ModelInfo& info() const override { return info_; }
  int64_t kv_floats_per_token() const override { return 2; }
  void bind_kv(int64_t, int64_t) override {}
  // Lets forwards that call wait_open() run.
  void open() {
    std::lock_guard<std::mutex> lk(mu_);
    open_ = true;
    cv_.notify_all();
  }

 protected:
  // Writes the logits rows of `rows` that want them; returns how many.
  int64_t fill(const std::vector<BatchRow>& rows, float* logits, int32_t (*best)(int32_t pos)) const {
    int64_t want = 0;
    for (const BatchRow& r : rows) {
      if (!r.want_logits) continue;
      ++want;
      std::fill(logits, logits + info_.n_vocab, 0.0f);
      logits[best(r.pos)] = 10.0f;
      logits += info_.n_vocab;
    }
    return want;
  }
  void wait_open() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return open_; });
  }
  ModelInfo info_;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Fails its first `fails` forwards; afterwards every logits row prefers token 100.
class FlakyModel : public TestModel {
 public:
  explicit FlakyModel(int fails) : fails_(fails) {}
  void forward(const std::vector<BatchRow>& rows, float* logits) override {
    if (fails_ > 0) {
      --fails_;
      throw std::runtime_error("device lost");
    }
    fill(rows, logits, [](int32_t) { return 100; });
  }

 private:
  int fails_;
};

EngineRequest request() {
  EngineRequest r;
  r.prompt = {1, 2, 3, 4};
  r.max_tokens = 3;
  r.ignore_eos = true;
  return r;
}

// One request ends with `error` and no token; the next is served in full.
void fails_then_serves(Model& model, const std::string& error) {
  auto tokp = Tokenizer::from_json_file(std::string(TF_SOURCE_DIR) + "/tests/fixtures/smollm2/tokenizer.json");
  EngineOptions o;
  o.parallel = 2, o.context = 64, o.page_size = 16, o.prompt_cache_gib = 0.001;
  Engine engine(model, *tokp, o);
  const EngineResult failed = engine.submit(request())->wait_result();
  EXPECT_EQ(failed.finish_reason, "error");
  EXPECT_EQ(failed.error, error);
  EXPECT_TRUE(failed.ids.empty());
  const EngineResult ok = engine.submit(request())->wait_result();
  EXPECT_EQ(ok.finish_reason, "length");
  EXPECT_EQ(ok.ids, (std::vector<int32_t>{100, 100, 100}));
  EXPECT_TRUE(ok.error.empty());
}

TEST(EngineFailure, AFailedForwardEndsTheRequestWithTheErrorAndTheEngineServesOn) {
  FlakyModel model(1);
  fails_then_serves(model, "device lost");
}

// The first forward with at least `row` + 1 logits rows gets a negative NaN at the last id of row `row`; every other
// row prefers token 100. Its first forward waits until opened, so that a second request can join the round after.
class NanModel : public TestModel {
 public:
  explicit NanModel(int64_t row) : row_(row) {}
  void forward(const std::vector<BatchRow>& rows, float* logits) override {
    wait_open();
    const int64_t want = fill(rows, logits, [](int32_t) { return 100; });
    if (!planted_ && want > row_)
      planted_ = true, logits[(row_ + 1) * info_.n_vocab - 1] = -std::numeric_limits<float>::quiet_NaN();
  }

 private:
  int64_t row_;
  bool planted_ = false;
};

TEST(EngineFailure, ANanLogitEndsTheRequestWithAClearErrorAndTheEngineServesOn) {
  NanModel model(0);
  model.open();
  fails_then_serves(model, "logits row 0 holds NaN");
}

// Its first forward's logits rows are all -inf; afterwards every logits row prefers token 100.
class NoFiniteModel : public TestModel {
 public:
  void forward(const std::vector<BatchRow>& rows, float* logits) override {
    const int64_t want = fill(rows, logits, [](int32_t) { return 100; });
    if (!planted_) planted_ = true, std::fill(logits, logits + want * info_.n_vocab, -INFINITY);
  }

 private:
  bool planted_ = false;
};

TEST(EngineFailure, ALogitsRowOfMinusInfinityEndsTheRequestWithAClearErrorAndTheEngineServesOn) {
  NoFiniteModel model;
  fails_then_serves(model, "logits row 0 has no finite value");
}

TEST(EngineFailure, ANanInTheSecondLogitsRowOfARoundIsFoundAndEndsTheRoundsRequests) {
  auto tokp = Tokenizer::from_json_file(std::string(TF_SOURCE_DIR) + "/tests/fixtures/smollm2/tokenizer.json");
  NanModel model(1);
  EngineOptions o;
  o.parallel = 2, o.context = 64, o.page_size = 16, o.prompt_cache_gib = 0.001, o.drafter = "none";
  Engine engine(model, *tokp, o);
  auto a = engine.submit(request()), b = engine.submit(request());
  model.open();  // both are in a round of two logits rows by the second round at the latest
  for (auto* h : {&a, &b}) {
    const EngineResult r = (*h)->wait_result();
    EXPECT_EQ(r.finish_reason, "error");
    EXPECT_EQ(r.error, "logits row 1 holds NaN");
  }
  EXPECT_EQ(engine.submit(request())->wait_result().ids, (std::vector<int32_t>{100, 100, 100}));
}

// Records the reservation and every round's size; holds its first round until opened; refuses when told to.
class RoundsModel : public TestModel {
 public:
  explicit RoundsModel(bool refuse) : refuse_(refuse) {}
  void reserve_rounds(int64_t rows, int64_t logit_rows, int64_t positions) override {
    rows_ = rows, logit_rows_ = logit_rows, positions_ = positions;
    if (refuse_) throw std::runtime_error("rounds of up to 24 rows need more device memory; lower --chunk");
  }
  void forward(const std::vector<BatchRow>& rows, float* logits) override {
    wait_open();
    // Replies of period 5, which the context drafter drafts four ahead.
    const int64_t want = fill(rows, logits, [](int32_t pos) { return 100 + (pos + 1) % 5; });
    seen_rows_ = std::max(seen_rows_, int64_t(rows.size()));
    seen_logits_ = std::max(seen_logits_, want);
  }
  int64_t rows_ = -1, logit_rows_ = -1, positions_ = -1, seen_rows_ = 0, seen_logits_ = 0;

 private:
  bool refuse_;
};

TEST(EngineRounds, TheLargestRoundIsReservedAtStartupAndNoRoundExceedsIt) {
  auto tokp = Tokenizer::from_json_file(std::string(TF_SOURCE_DIR) + "/tests/fixtures/smollm2/tokenizer.json");
  for (const char* drafter : {"auto", "none"}) {
    RoundsModel model(false);
    EngineOptions o;
    o.parallel = 3, o.chunk = 8, o.draft_max = 4, o.context = 128, o.page_size = 16, o.prompt_cache_gib = 0.001;
    o.drafter = drafter;
    const bool drafts = std::string(drafter) != "none";
    {
      Engine engine(model, *tokp, o);
      EXPECT_EQ(model.rows_, 3 * 8);
      EXPECT_EQ(model.logit_rows_, drafts ? 3 * 5 : 3);
      EXPECT_EQ(model.positions_, 128);
      std::vector<std::shared_ptr<RequestHandle>> hs;
      for (int i = 0; i < 3; ++i) {
        EngineRequest r;
        for (int j = 0; j < 20; ++j) r.prompt.push_back(1 + i + j);  // chunks of 8, 8 and 4
        r.max_tokens = 24, r.ignore_eos = true;
        hs.push_back(engine.submit(r));
      }
      model.open();  // the first round held the first prompt alone; the other two join the second
      for (auto& h : hs) EXPECT_EQ(h->wait_result().finish_reason, "length");
    }
    EXPECT_EQ(model.seen_rows_, 3 * 8) << drafter;
    if (drafts) {
      EXPECT_GE(model.seen_logits_, 5) << "a token and four drafts verified in one round";
      EXPECT_LE(model.seen_logits_, 3 * 5);
    } else {
      EXPECT_EQ(model.seen_logits_, 3) << "three sequences decoding together";
    }
  }
}

TEST(EngineRounds, AReservationTheModelRefusesStopsTheEngineAtStartup) {
  auto tokp = Tokenizer::from_json_file(std::string(TF_SOURCE_DIR) + "/tests/fixtures/smollm2/tokenizer.json");
  RoundsModel model(true);
  EngineOptions o;
  o.parallel = 3, o.chunk = 8, o.context = 128, o.page_size = 16, o.prompt_cache_gib = 0.001;
  try {
    Engine engine(model, *tokp, o);
    FAIL() << "the engine started without its rounds' memory";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("--chunk"), std::string::npos) << e.what();
  }
}

// Records each row's position and kind; says prompt rows take their own arithmetic when `differs`.
class KindModel : public TestModel {
 public:
  explicit KindModel(bool differs) : differs_(differs) {}
  bool prompt_arithmetic_differs() const override { return differs_; }
  void forward(const std::vector<BatchRow>& rows, float* logits) override {
    for (const BatchRow& r : rows) seen.push_back({r.pos, r.prompt});
    fill(rows, logits, [](int32_t) { return 100; });
  }
  std::vector<std::pair<int32_t, bool>> seen;

 private:
  bool differs_;
};

TEST(EnginePromptRows, PromptRowsAreMarkedAndOnlyTheirKvIsCachedWhereTheirArithmeticDiffers) {
  auto tokp = Tokenizer::from_json_file(std::string(TF_SOURCE_DIR) + "/tests/fixtures/smollm2/tokenizer.json");
  for (bool differs : {false, true}) {
    KindModel model(differs);
    EngineOptions o;
    o.parallel = 1, o.context = 64, o.page_size = 4, o.chunk = 3, o.drafter = "none";
    Engine engine(model, *tokp, o);
    EngineRequest a;
    a.prompt = {1, 2, 3, 4, 5, 6, 7, 8};
    a.max_tokens = 8, a.ignore_eos = true;
    const EngineResult ra = engine.submit(a)->wait_result();
    ASSERT_EQ(ra.ids.size(), 8u);
    for (auto [pos, prompt] : model.seen) EXPECT_EQ(prompt, pos < 8) << "position " << pos;
    // The follow-up turn holds the reply: fed up to position 14, so three full pages, or two of the prompt alone.
    EngineRequest b;
    b.prompt = a.prompt;
    b.prompt.insert(b.prompt.end(), ra.ids.begin(), ra.ids.end());
    for (int32_t t : {5, 6, 7, 9}) b.prompt.push_back(t);
    b.max_tokens = 1, b.ignore_eos = true;
    const EngineResult rb = engine.submit(b)->wait_result();
    EXPECT_EQ(rb.cached_tokens, differs ? 8 : 12) << "prompt arithmetic differs: " << differs;
  }
}

// Samples on its "device": records which rows asked for candidates; every row's argmax and draw are token 100.
class SamplingModel : public TestModel {
 public:
  bool device_sampling() const override { return true; }
  void forward(const std::vector<BatchRow>&, float*) override { throw std::runtime_error("forward_sample only"); }
  void forward_sample(const std::vector<BatchRow>&, const std::vector<RowSampling>& sampling,
                      std::vector<RowCandidates>& out) override {
    out.clear();
    for (const RowSampling& s : sampling) {
      asked.push_back(s.candidates);
      RowCandidates c;
      c.greedy = c.gumbel = 100, c.gumbel_logit = 10.0f;
      if (s.candidates) c.top = {{10.0f, 100}, {0.0f, 0}, {0.0f, 1}}, c.lse = 10.0, c.max_t = 10.0, c.sum_t = 1.0;
      out.push_back(c);
    }
  }
  std::vector<bool> asked;
};

TEST(EngineSampling, OnlyGreedyRowsWithoutLogprobsAskTheDeviceForTheirArgmaxAlone) {
  auto tokp = Tokenizer::from_json_file(std::string(TF_SOURCE_DIR) + "/tests/fixtures/smollm2/tokenizer.json");
  struct Case {
    double temperature;
    int top_logprobs;
    bool candidates;
  };
  for (const Case& k : {Case{0.0, -1, false}, Case{0.0, 2, true}, Case{0.8, -1, true}}) {
    SamplingModel model;
    EngineOptions o;
    o.parallel = 1, o.context = 64, o.page_size = 16, o.drafter = "none";
    Engine engine(model, *tokp, o);
    EngineRequest r = request();
    r.sampling.temperature = k.temperature, r.top_logprobs = k.top_logprobs;
    const EngineResult res = engine.submit(r)->wait_result();
    EXPECT_EQ(res.ids, (std::vector<int32_t>{100, 100, 100}));
    ASSERT_EQ(model.asked.size(), 3u);
    for (bool a : model.asked) EXPECT_EQ(a, k.candidates) << "temperature " << k.temperature;
    if (k.top_logprobs > 0) {
      ASSERT_EQ(res.logprobs.size(), 3u);
      EXPECT_EQ(res.logprobs[0].top.size(), 2u);
      EXPECT_FLOAT_EQ(res.logprobs[0].logprob, 0.0f);
    }
  }
  // A greedy and a sampled request served together: each row asks as its own request needs.
  SamplingModel model;
  EngineOptions o;
  o.parallel = 2, o.context = 64, o.page_size = 16, o.drafter = "none";
  Engine engine(model, *tokp, o);
  EngineRequest greedy = request(), sampled = request();
  sampled.sampling.temperature = 0.7;
  auto a = engine.submit(greedy), b = engine.submit(sampled);
  EXPECT_EQ(a->wait_result().ids.size(), 3u);
  EXPECT_EQ(b->wait_result().ids.size(), 3u);
  EXPECT_EQ(std::count(model.asked.begin(), model.asked.end(), true), 3);
  EXPECT_EQ(std::count(model.asked.begin(), model.asked.end(), false), 3);
}

}  // namespace
}  // namespace tf
