#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/sampler.h"

namespace tf {

struct EngineRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 256;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool allow_draft = true;
  int top_logprobs = -1;  // -1: no logprobs; else how many alternatives per token
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // best alternatives, (logit desc, id asc)
};

struct EngineResult {
  std::vector<int32_t> ids;    // reply tokens, through the one that ended it
  std::string text;            // without stop string and special tokens
  std::string finish_reason;   // "stop", "length", "cancelled", or "error" (the model failed; see error)
  std::string error;           // what failed, for "error"
  int64_t prompt_tokens = 0, cached_tokens = 0, draft_tokens = 0, accepted_tokens = 0;
  double queue_s = 0, ttft_s = 0, total_s = 0;
  std::vector<double> token_gaps_s;  // time between successive reply tokens
  std::vector<TokenLogprob> logprobs;
};

// The meeting point of one request's HTTP thread (reads) and the engine loop (writes).
class RequestHandle {
 public:
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  // Blocks until there is new text or the end; appends what is new. False once finished and fully read.
  bool wait_next(std::string& text, std::vector<TokenLogprob>& lps);
  // Waits for the end; the result.
  const EngineResult& wait_result();

  void push(const std::string& text, const TokenLogprob* lp);  // engine side
  void finish(EngineResult r);                                  // engine side

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::string text_;
  std::vector<TokenLogprob> lps_;
  bool finished_ = false;
  EngineResult result_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace tf
