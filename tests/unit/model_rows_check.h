#pragma once
#include <cstring>
#include <string>
#include <vector>

#include "engine/kv_cache.h"
#include "model/model.h"

namespace tf {

// Rows of several sequences sharing one forward (prefill chunks and decode rows mixed, pages handed out in an
// interleaved order) against each sequence run alone one token at a time; "" when every row is bit-identical.
inline std::string batched_rows_differ(Model& m, const std::vector<std::vector<int32_t>>& prompts,
                                       int64_t page_size = 8) {
  const int64_t V = m.info().n_vocab;
  KvCache kv(64, page_size, 0);
  m.bind_kv(64, page_size);
  std::vector<KvLease> leases;
  std::vector<BatchRow> rows;
  for (size_t s = 0; s < prompts.size(); ++s) leases.push_back(*kv.acquire({}, 16));
  for (size_t s = 0; s < prompts.size(); ++s)
    for (size_t i = 0; i < prompts[s].size(); ++i) rows.push_back({&leases[s].pages, prompts[s][i], int32_t(i), true});
  std::vector<float> batched(rows.size() * size_t(V));
  m.forward(rows, batched.data());
  size_t r = 0;
  for (auto& p : prompts) {
    KvLease solo = *kv.acquire({}, 16);
    std::vector<float> one(static_cast<size_t>(V));
    for (size_t i = 0; i < p.size(); ++i, ++r) {
      std::vector<BatchRow> row{{&solo.pages, p[i], int32_t(i), true}};
      m.forward(row, one.data());
      if (std::memcmp(one.data(), batched.data() + r * size_t(V), size_t(V) * sizeof(float)) != 0)
        return "row " + std::to_string(r) + " (position " + std::to_string(i) + ") differs from its solo run";
    }
  }
  return {};
}

}  // namespace tf
