#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "io/ggml_types.h"
#include "quant/scaled/scaled.h"

namespace tf::cpu {

// A stored 2-D weight as the checkpoint holds it: n_out rows of n_in elements in `type`, used in place.
struct WeightView {
  std::string name;
  GgmlType type = GgmlType::F32;
  int64_t n_in = 0, n_out = 0;
  const uint8_t* data = nullptr;
  int64_t row_bytes = 0;
};

// Why the CPU backend cannot run this weight, or empty when it can.
std::string matmul_refusal(const WeightView& w);

// y[r, o] = sum_c W[o, c] * x[r, c]; x is [n_rows, n_in], y is [n_rows, n_out]. Split over output columns.
void matmul(const WeightView& w, const float* x, int64_t n_rows, float* y, ThreadPool& pool);

// Why the CPU backend cannot run this fp8_block / mxfp4 weight (rows not whole 32-element groups …), or empty.
std::string scaled_matmul_refusal(const quant::ScaledWeight& w);
// matmul for fp8_block and mxfp4 weights read as stored, with the same per-row arithmetic as matmul.
void matmul_scaled(const quant::ScaledWeight& w, const float* x, int64_t n_rows, float* y, ThreadPool& pool);

// One routed (row, expert) product of a mixture-of-experts layer.
struct ExpertPair {
  int32_t row;     // the activation row in x
  int32_t expert;  // index into the expert list
};
// y[p] = W[pairs[p].expert] x[pairs[p].row] for every pair: [n_pairs, n_out] (all experts share n_in and n_out).
// Pairs are grouped by expert internally; each pair's bits equal the same row computed alone with matmul_scaled.
void matmul_experts(const std::vector<quant::ScaledWeight>& experts, const float* x, const ExpertPair* pairs,
                    int64_t n_pairs, float* y, ThreadPool& pool);

// y = x / sqrt(mean(x^2) + eps) * w, the mean of squares accumulated in double.
void rmsnorm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y);

enum class RopePairing { Norm, Neox };  // adjacent pairs (llama GGUF) or halves (qwen2, HF layout)

// Angles of one position, [n_rot/2] cos then sin, computed in double from the absolute position only.
void rope_angles(int64_t pos, int64_t n_rot, double freq_base, double freq_scale, const float* freq_factors,
                 float* cos_out, float* sin_out);
// Rotates every head of every row in place; cs holds each row's cos/sin from rope_angles.
void rope(float* x, int64_t n_rows, int64_t row_stride, int64_t n_heads, int64_t head_dim, int64_t n_rot,
          const float* cos, const float* sin, RopePairing pairing);

// Keys and values of one sequence in one layer, stored in fixed-size pages: position j lives in page j / page_size,
// row j % page_size, each row `row_stride` floats (all KV heads).
struct KvView {
  const float* const* k_pages = nullptr;
  const float* const* v_pages = nullptr;
  int64_t page_size = 0;
  int64_t row_stride = 0;
  const float* k(int64_t j) const { return k_pages[j / page_size] + (j % page_size) * row_stride; }
  const float* v(int64_t j) const { return v_pages[j / page_size] + (j % page_size) * row_stride; }
};

// Causal GQA attention of each query row r over its sequence's keys [0, pos[r]]: q and out are [n_rows, n_head*hd].
// Keys are visited in position order only, so a row's bits do not depend on the batch or the page layout.
void attention(const float* q, int64_t n_rows, const int32_t* pos, const KvView& kv, int64_t n_head, int64_t n_kv_head,
               int64_t head_dim, float scale, float* out, ThreadPool& pool);

// out = silu(gate) * up, elementwise.
void swiglu(const float* gate, const float* up, float* out, int64_t n);

// Rows of the embedding table for `ids`, decoded exactly; out is [n, n_in].
void embedding(const WeightView& table, const int32_t* ids, int64_t n, float* out);

void add_inplace(float* y, const float* x, int64_t n);
void add_bias(float* y, const float* bias, int64_t n_rows, int64_t n);

// Token id of the largest logit, ties to the lower id.
int32_t argmax(const float* logits, int64_t n);
// The k best (logit desc, id asc) candidates.
std::vector<int32_t> topk(const float* logits, int64_t n, int64_t k);
// Probabilities in double, max-subtracted.
void softmax(const float* logits, int64_t n, double* probs);

}  // namespace tf::cpu
