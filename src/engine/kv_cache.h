#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

namespace tf {

// The KV pages a sequence holds: its page table and how many leading prompt tokens came from the prefix cache.
struct KvLease {
  std::vector<int32_t> pages;
  int64_t cached_tokens = 0;
};

// Paged KV bookkeeping (the model owns the memory) with a prefix cache keyed by a hash chain over token ids, trusted
// only after tokens and parent compare equal; not thread-safe: the engine loop is its only user.
class KvCache {
 public:
  KvCache(int64_t n_pages, int64_t page_size, uint64_t salt);
  int64_t page_size() const { return page_size_; }
  int64_t pages_total() const { return n_pages_; }
  int64_t pages_used() const { return n_pages_ - int64_t(free_.size()) - int64_t(lru_.size()); }
  int64_t pages_cached() const { return int64_t(by_key_.size()); }
  int64_t pages_for(int64_t tokens) const { return (tokens + page_size_ - 1) / page_size_; }

  // Reuses the longest cached prefix of `prompt` (always leaving its last token to compute) and reserves pages for
  // `total_tokens` positions; nullopt when that many pages cannot be had now.
  std::optional<KvLease> acquire(const std::vector<int32_t>& prompt, int64_t total_tokens);
  // Returns a lease; the full pages among the first `n_valid` tokens (KV written) become reusable prefix pages.
  void release(KvLease& lease, const std::vector<int32_t>& tokens, int64_t n_valid);
  // Drops every unreferenced cached page (tests, and a cold-start switch).
  void clear_cache();

 private:
  struct PageInfo {
    int32_t refs = 0;
    bool cached = false;
    uint64_t key = 0, parent = 0;
    std::vector<int32_t> tokens;
    std::list<int32_t>::iterator lru_pos;
  };
  uint64_t chain(uint64_t parent, const int32_t* tokens) const;
  int32_t take_page();
  void unref(int32_t page);

  int64_t n_pages_, page_size_;
  uint64_t salt_;
  std::vector<PageInfo> info_;
  std::vector<int32_t> free_;
  std::list<int32_t> lru_;  // cached pages nobody holds, least recently used first
  std::unordered_map<uint64_t, int32_t> by_key_;
};

}  // namespace tf
