#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "model/model.h"

namespace tf {

struct SamplingParams {
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;
  double min_p = 0.0;
  uint64_t seed = 0;
};

// Keyed sampler (specs/exactness.md): the draw for token v at absolute position p depends only on (seed, p, v).
namespace sampler {
constexpr uint64_t kC1 = 0xD1B54A32D192ED03ull;             // position multiplier (odd)
constexpr uint64_t kC2 = 0x8CB92BA72F3D8DD7ull;             // token-id multiplier (odd)
uint64_t mix(uint64_t z);                                   // splitmix64 finaliser
double uniform(uint64_t seed, int64_t pos, int32_t token);  // in (0, 1)
double gumbel(uint64_t seed, int64_t pos, int32_t token);
// Seed used when a request gives none: SHA-256 over "id,id,...|salt", first 8 bytes LE masked to 63 bits.
uint64_t seed_from_prompt(const std::vector<int32_t>& prompt, std::string_view salt);
}  // namespace sampler

// Picks the token for position `pos` from one row of logits.
int32_t sample_token(const float* logits, int64_t n_vocab, const SamplingParams& p, int64_t pos);
// Whether a device backend's candidates decide this draw exactly as the full row would; when not, the engine samples
// from the row's full logits instead.
bool candidates_suffice(const RowCandidates& c, const SamplingParams& p);
// The same choice from the candidates; requires candidates_suffice.
int32_t sample_candidates(const RowCandidates& c, const SamplingParams& p, int64_t pos);

// One logits row as the engine sees it: full logits (CPU) or device candidates.
struct LogitRow {
  const float* full = nullptr;
  const RowCandidates* cand = nullptr;
};
int32_t sample_row(const LogitRow& row, int64_t n_vocab, const SamplingParams& p, int64_t pos);

}  // namespace tf
