#include "base/thread_pool.h"

#include <algorithm>

namespace tf {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_tasks() {
  for (;;) {
    size_t b = next_.fetch_add(chunk_);
    if (b >= n_) break;
    (*fn_)(b, std::min(n_, b + chunk_));
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly before sleeping: decode issues hundreds of small jobs per token.
    for (int spin = 0; spin < 20000 && generation_.load(std::memory_order_acquire) == seen; ++spin) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return generation_.load() != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_) return;
    run_tasks();
    active_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  size_t threads = workers_.size() + 1;
  size_t chunk = std::max<size_t>(grain, (n + threads * 4 - 1) / (threads * 4));
  if (workers_.empty() || n <= chunk) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    n_ = n;
    chunk_ = chunk;
    fn_ = &fn;
    next_.store(0);
    active_.store(int(workers_.size()));
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  run_tasks();
  while (active_.load(std::memory_order_acquire) != 0) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

}  // namespace tf
