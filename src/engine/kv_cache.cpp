#include "engine/kv_cache.h"

#include "base/error.h"
#include "engine/sampler.h"

namespace tf {

KvCache::KvCache(int64_t n_pages, int64_t page_size, uint64_t salt)
    : n_pages_(n_pages), page_size_(page_size), salt_(salt), info_(size_t(n_pages)) {
  TF_CHECK(n_pages > 0 && page_size > 0, "empty KV pool");
  for (int64_t p = n_pages - 1; p >= 0; --p) free_.push_back(int32_t(p));
}

uint64_t KvCache::chain(uint64_t parent, const int32_t* tokens) const {
  uint64_t h = sampler::mix(parent ^ salt_);
  for (int64_t i = 0; i < page_size_; ++i)
    h = sampler::mix(h ^ (uint64_t(uint32_t(tokens[i])) + 0x9E3779B97F4A7C15ull));
  return h;
}

int32_t KvCache::take_page() {
  if (!free_.empty()) {
    int32_t p = free_.back();
    free_.pop_back();
    return p;
  }
  TF_CHECK(!lru_.empty(), "KV pool exhausted despite the reservation check");
  int32_t p = lru_.front();  // evict the least recently used cached page
  lru_.pop_front();
  by_key_.erase(info_[p].key);
  info_[p].cached = false;
  info_[p].tokens.clear();
  return p;
}

std::optional<KvLease> KvCache::acquire(const std::vector<int32_t>& prompt, int64_t total_tokens) {
  const int64_t need = pages_for(total_tokens);
  KvLease lease;
  // Walk the chain over full prompt pages, stopping before the page holding the last prompt token.
  const int64_t reusable = prompt.empty() ? 0 : int64_t(prompt.size() - 1) / page_size_;
  std::vector<int32_t> hits;
  uint64_t key = 0;
  for (int64_t i = 0; i < reusable && i < need; ++i) {
    const int32_t* t = prompt.data() + i * page_size_;
    uint64_t k = chain(key, t);
    auto it = by_key_.find(k);
    if (it == by_key_.end()) break;
    const PageInfo& pi = info_[it->second];
    if (pi.parent != key || !std::equal(pi.tokens.begin(), pi.tokens.end(), t)) break;
    hits.push_back(it->second);
    key = k;
  }
  int64_t hits_in_lru = 0;
  for (int32_t p : hits) hits_in_lru += info_[p].refs == 0;
  const int64_t available = int64_t(free_.size()) + int64_t(lru_.size()) - hits_in_lru;
  if (need - int64_t(hits.size()) > available) return std::nullopt;
  for (int32_t p : hits) {
    if (info_[p].refs++ == 0) lru_.erase(info_[p].lru_pos);
    lease.pages.push_back(p);
  }
  lease.cached_tokens = int64_t(hits.size()) * page_size_;
  while (int64_t(lease.pages.size()) < need) {
    int32_t p = take_page();
    info_[p].refs = 1;
    lease.pages.push_back(p);
  }
  return lease;
}

void KvCache::unref(int32_t p) {
  PageInfo& pi = info_[p];
  TF_CHECK(pi.refs > 0, "KV page {} released twice", p);
  if (--pi.refs > 0) return;
  if (pi.cached) {
    lru_.push_back(p);
    pi.lru_pos = std::prev(lru_.end());
  } else {
    free_.push_back(p);
  }
}

void KvCache::release(KvLease& lease, const std::vector<int32_t>& tokens, int64_t n_valid) {
  uint64_t key = 0;
  const int64_t full = std::min<int64_t>(n_valid, int64_t(tokens.size())) / page_size_;
  for (int64_t i = 0; i < int64_t(lease.pages.size()); ++i) {
    int32_t p = lease.pages[size_t(i)];
    if (i < full) {
      const int32_t* t = tokens.data() + i * page_size_;
      uint64_t k = chain(key, t);
      PageInfo& pi = info_[p];
      if (!pi.cached && !by_key_.count(k)) {
        pi.cached = true;
        pi.key = k;
        pi.parent = key;
        pi.tokens.assign(t, t + page_size_);
        by_key_[k] = p;
      }
      key = k;
    }
    unref(p);
  }
  lease.pages.clear();
}

void KvCache::clear_cache() {
  for (int32_t p : lru_) {
    by_key_.erase(info_[p].key);
    info_[p].cached = false;
    info_[p].tokens.clear();
    free_.push_back(p);
  }
  lru_.clear();
}

}  // namespace tf
