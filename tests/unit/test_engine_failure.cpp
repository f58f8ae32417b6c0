// A forward that throws ends the affected requests with finish_reason "error" and the reason, and the engine goes
// on serving the next request.
#include <gtest/gtest.h>

#include <stdexcept>

#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tf {
namespace {

// Fails its first `fails` forwards; afterwards every logits row prefers token 100.
class FlakyModel : public Model {
 public:
  explicit FlakyModel(int fails) : fails_(fails) {
    info_.family = "test", info_.n_vocab = 49152, info_.n_ctx_train = 4096;
  }
  const ModelInfo& info() const override { return info_; }
  int64_t kv_floats_per_token() const override { return 2; }
  void bind_kv(int64_t, int64_t) override {}
  void forward(const std::vector<BatchRow>& rows, float* logits) override {
    if (fails_ > 0) {
      --fails_;
      throw std::runtime_error("device lost");
    }
    for (const BatchRow& r : rows) {
      if (!r.want_logits) continue;
      std::fill(logits, logits + info_.n_vocab, 0.0f);
      logits[100] = 10.0f;
      logits += info_.n_vocab;
    }
  }

 private:
  ModelInfo info_;
  int fails_;
};

EngineRequest request() {
  EngineRequest r;
  r.prompt = {1, 2, 3, 4};
  r.max_tokens = 3;
  r.ignore_eos = true;
  return r;
}

TEST(EngineFailure, AFailedForwardEndsTheRequestWithTheErrorAndTheEngineServesOn) {
  auto tokp = Tokenizer::from_json_file(std::string(TF_SOURCE_DIR) + "/tests/fixtures/smollm2/tokenizer.json");
  FlakyModel model(1);
  EngineOptions o;
  o.parallel = 2, o.context = 64, o.page_size = 16, o.prompt_cache_gib = 0.001;
  Engine engine(model, *tokp, o);
  const EngineResult failed = engine.submit(request())->wait_result();
  EXPECT_EQ(failed.finish_reason, "error");
  EXPECT_EQ(failed.error, "device lost");
  const EngineResult ok = engine.submit(request())->wait_result();
  EXPECT_EQ(ok.finish_reason, "length");
  EXPECT_EQ(ok.ids, (std::vector<int32_t>{100, 100, 100}));
  EXPECT_TRUE(ok.error.empty());
}

}  // namespace
}  // namespace tf
