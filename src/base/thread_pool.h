#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tf {

// Fixed workers that split a job into independent tasks; the caller works too. Work is divided by output
// columns only, so results never depend on the number of threads.
class ThreadPool {
 public:
  explicit ThreadPool(int n_threads = 0);  // 0: one per hardware thread
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  // Calls fn(begin, end) over [0, n) in chunks of at least `grain` items, in parallel.
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);

 private:
  void worker_loop();
  void run_tasks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<size_t> next_{0};
  std::atomic<int> active_{0};
  size_t n_ = 0, chunk_ = 1;
  const std::function<void(size_t, size_t)>* fn_ = nullptr;
  bool stop_ = false;
};

}  // namespace tf
