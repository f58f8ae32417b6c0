#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "backend/cpu/ops.h"
#include "base/error.h"
#include "base/sha256.h"

namespace tf {
namespace sampler {

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double uniform(uint64_t seed, int64_t pos, int32_t token) {
  uint64_t h = mix(seed + 0x9E3779B97F4A7C15ull);
  h = mix(h ^ (uint64_t(pos) * kC1));
  h = mix(h ^ (uint64_t(uint32_t(token)) * kC2));
  return (double(h >> 11) + 0.5) * 0x1.0p-53;
}

double gumbel(uint64_t seed, int64_t pos, int32_t token) { return -std::log(-std::log(uniform(seed, pos, token))); }

uint64_t seed_from_prompt(const std::vector<int32_t>& prompt, std::string_view salt) {
  std::string s;
  for (size_t i = 0; i < prompt.size(); ++i) s += (i ? "," : "") + std::to_string(prompt[i]);
  s += "|";
  s += salt;
  auto d = sha256(s);
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | d[size_t(i)];
  return v & 0x7FFFFFFFFFFFFFFFull;
}

}  // namespace sampler

namespace {

// How many candidates in (logit desc, id asc) order survive top-p and min-p; `mass` is the normaliser of their
// probabilities at the row's temperature relative to the first (0: the candidates' own sum).
size_t kept_count(const std::vector<double>& scaled, double mass, const SamplingParams& p) {
  size_t keep = scaled.size();
  if (p.top_p < 1.0 || p.min_p > 0.0) {
    std::vector<double> prob(scaled.size());
    double sum = 0;
    for (size_t i = 0; i < scaled.size(); ++i) sum += prob[i] = std::exp(scaled[i] - scaled[0]);
    if (mass > 0) sum = mass;
    for (auto& q : prob) q /= sum;
    if (p.top_p < 1.0) {
      double cum = 0;
      size_t i = 0;
      for (; i < keep; ++i) {
        cum += prob[i];
        if (cum >= p.top_p) break;
      }
      keep = std::min(keep, i + 1);
    }
    if (p.min_p > 0.0) {
      size_t i = 1;
      while (i < keep && prob[i] >= p.min_p * prob[0]) ++i;
      keep = i;
    }
  }
  return keep;
}

// The keyed draw among the candidates that survive the filters.
int32_t draw_filtered(const std::vector<int32_t>& ids, const std::vector<double>& scaled, double mass,
                      const SamplingParams& p, int64_t pos) {
  const size_t keep = kept_count(scaled, mass, p);
  size_t best = 0;
  double best_v = -INFINITY;
  for (size_t i = 0; i < keep; ++i) {
    double v = scaled[i] + sampler::gumbel(p.seed, pos, ids[i]);
    if (v > best_v) best_v = v, best = i;
  }
  return ids[best];
}

}  // namespace

namespace {

struct Filtered {
  std::vector<int32_t> ids;
  std::vector<double> scaled;
  double mass = 0;
};

Filtered filtered_of(const RowCandidates& c, const SamplingParams& p) {
  Filtered f;
  const size_t k = p.top_k > 0 ? std::min(size_t(p.top_k), c.top.size()) : c.top.size();
  for (size_t i = 0; i < k; ++i) f.ids.push_back(c.top[i].second), f.scaled.push_back(double(c.top[i].first) / p.temperature);
  // Without top_k the probabilities are over the whole vocabulary, whose mass the device summed.
  if (p.top_k <= 0 && k > 0) f.mass = c.sum_t * std::exp(c.max_t - f.scaled[0]);
  return f;
}

bool unfiltered(const SamplingParams& p) { return p.top_k <= 0 && p.top_p >= 1.0 && p.min_p <= 0.0; }

}  // namespace

bool candidates_suffice(const RowCandidates& c, const SamplingParams& p) {
  if (p.temperature <= 0.0 || unfiltered(p) || c.complete) return true;
  if (p.top_k > 0) return size_t(p.top_k) <= c.top.size();
  // Without top_k the filters must stop before the last candidate, or tokens beyond the cut could be in the set.
  const Filtered f = filtered_of(c, p);
  return kept_count(f.scaled, f.mass, p) < f.ids.size();
}

int32_t sample_candidates(const RowCandidates& c, const SamplingParams& p, int64_t pos) {
  if (p.temperature <= 0.0) return c.greedy;
  if (unfiltered(p)) return c.gumbel;
  TF_CHECK(candidates_suffice(c, p), "the filters reach past the {} device candidates", c.top.size());
  const Filtered f = filtered_of(c, p);
  return draw_filtered(f.ids, f.scaled, f.mass, p, pos);
}

int32_t sample_row(const LogitRow& row, int64_t n_vocab, const SamplingParams& p, int64_t pos) {
  return row.cand ? sample_candidates(*row.cand, p, pos) : sample_token(row.full, n_vocab, p, pos);
}

int32_t sample_token(const float* logits, int64_t n_vocab, const SamplingParams& p, int64_t pos) {
  if (p.temperature <= 0.0) return cpu::argmax(logits, n_vocab);
  if (p.top_k <= 0 && p.top_p >= 1.0 && p.min_p <= 0.0) {
    // No filter: one pass over the vocabulary; a tie of noisy values goes to the earlier (-logit, id) candidate,
    // exactly as the sorted form below would pick it.
    int32_t best = 0;
    double best_v = -INFINITY;
    for (int32_t v = 0; v < int32_t(n_vocab); ++v) {
      double val = double(logits[v]) / p.temperature + sampler::gumbel(p.seed, pos, v);
      if (val > best_v || (val == best_v && logits[v] > logits[best])) best_v = val, best = v;
    }
    return best;
  }
  // Candidates in (logit desc, id asc) order; only the first top_k when set.
  int64_t k = p.top_k > 0 ? std::min(p.top_k, n_vocab) : n_vocab;
  std::vector<int32_t> cand = cpu::topk(logits, n_vocab, k);
  std::vector<double> scaled(cand.size());
  for (size_t i = 0; i < cand.size(); ++i) scaled[i] = double(logits[cand[i]]) / p.temperature;
  return draw_filtered(cand, scaled, 0.0, p, pos);
}

}  // namespace tf
