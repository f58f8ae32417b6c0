#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/drafter.h"
#include "engine/kv_cache.h"
#include "engine/request.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tf {

struct EngineOptions {
  int parallel = 4;         // sequences per lane round
  int64_t context = 4096;   // positions per sequence
  int64_t chunk = 128;      // prompt tokens per sequence per round
  int64_t max_queue = 512;  // waiting requests before refusing
  int64_t page_size = 32;   // tokens per KV page
  double prompt_cache_gib = 1.0;
  std::string drafter = "auto";
  int64_t draft_max = 4;
};

struct EngineStats {
  int64_t running = 0, waiting = 0, pages_used = 0, pages_total = 0, pages_cached = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0, cache_hit_tokens = 0, cache_query_tokens = 0;
  int64_t draft_tokens = 0, accepted_tokens = 0, rounds = 0;
};

class QueueFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Continuous batching over one model: each lane round is one forward over the rows of every running sequence
// (prompt chunks, decode tokens and their drafts); sequences join and leave between rounds.
class Engine {
 public:
  Engine(Model& model, const Tokenizer& tok, EngineOptions opts);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request (prompt and max_tokens already checked against the context); throws QueueFull.
  std::shared_ptr<RequestHandle> submit(EngineRequest req);
  EngineStats stats() const;
  int64_t context() const { return opts_.context; }
  const EngineOptions& options() const { return opts_; }
  // Empties the prefix cache at the start of the next round (used for cold-cache measurements).
  void clear_prefix_cache() { clear_cache_.store(true); }

 private:
  struct Seq;
  struct Waiting {
    EngineRequest req;
    std::shared_ptr<RequestHandle> handle;
    double submitted = 0;
  };
  void run();
  void admit();
  void round();
  void emit(Seq& s, int32_t token, const LogitRow& logits);
  void finish(Seq& s, const std::string& reason);

  Model& model_;
  const Tokenizer& tok_;
  EngineOptions opts_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<Drafter> drafter_;
  std::vector<std::unique_ptr<Seq>> running_;
  std::vector<float> logits_;
  std::vector<RowCandidates> cands_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Waiting> waiting_;
  bool stop_ = false;
  std::atomic<bool> clear_cache_{false};
  EngineStats stats_;  // counters under mu_
  std::thread thread_;
};

}  // namespace tf
