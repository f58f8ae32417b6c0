#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/stop_strings.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tf {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 256;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

struct GenerateResult {
  std::vector<int32_t> ids;   // generated ids, through the one that ended the reply
  std::string text;           // without the stop string, without special tokens
  std::string finish_reason;  // "stop" or "length"
  double prompt_seconds = 0, decode_seconds = 0;
};

// Text deltas as they become final; return false to cancel (the client went away).
using DeltaFn = std::function<bool(const std::string& delta)>;

// One sequence at a time over one model: chunked prefill, then decode with the keyed sampler.
class Generator {
 public:
  Generator(Model& model, const Tokenizer& tok, int64_t n_ctx, int64_t prefill_chunk = 256);
  int64_t context() const { return n_ctx_; }
  GenerateResult generate(const GenerateRequest& req, const DeltaFn& on_delta = nullptr);
  // Teacher-forced logits of every position, [n, n_vocab], prefilled `chunk` rows at a time.
  std::vector<float> prompt_logits(const std::vector<int32_t>& ids, int64_t chunk);

 private:
  Model& model_;
  const Tokenizer& tok_;
  int64_t n_ctx_, chunk_;
  std::unique_ptr<SequenceState> seq_;
  std::vector<float> logits_;
};

}  // namespace tf
