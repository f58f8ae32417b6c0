#pragma once
#include <cstddef>
#include <cstdint>

namespace tf::cuda {

// Paged KV on the device: page p of `layer` holds page_size K rows then page_size V rows of kv_row floats,
// at base + p * page_floats + layer_offset. Every pointer here is device memory.
struct PagedKv {
  const float* base = nullptr;
  int64_t page_floats = 0, layer_offset = 0, page_size = 0, kv_row = 0;
  const int32_t* page_table = nullptr;  // [n_seqs, max_pages]
  int64_t max_pages = 0;
};

// Causal GQA attention of each query row over its sequence's keys [0, pos[r]], one block per (row, head). Keys are
// split over threads by absolute position only and reduced in a fixed order, so a row's bits never depend on the
// other rows. q rows are q_stride floats apart (n_head * head_dim used), out is [n_rows, n_head * head_dim];
// row_seq[r] picks the row's page-table line.
void attention(const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos, const int32_t* row_seq,
               const PagedKv& kv, int64_t n_head, int64_t n_kv_head, int64_t head_dim, float scale, int64_t max_keys,
               float* out);

// The same attention on tensor cores (head size 64 or 128, up to 16 query heads per KV head, KV pages of a multiple
// of 16 tokens), for every row count:
// tiles of 16 (row, head) pairs of one KV head, keys in 256-key chunks of eight 32-key blocks (one per warp), Q K^T
// and P V as bf16 hi/lo products (lo x lo dropped), a chunk's warps merged in order, the chunks folded in order. No
// row's bits depend on the others.
bool attention_mma_supports(int64_t head_dim, int64_t n_head, int64_t n_kv_head);
// Device scratch for chunk-parallel attention: each chunk's (m, l, o) per (row, head), [chunk][row][head][D + 2].
// Up to max_rows rows whose keys (max_keys: any row's count this call) span several 256-key chunks get a block per
// chunk and a combine kernel; the bits are those of the in-block walk.
constexpr int64_t kAttnChunkKeys = 256;
struct AttnChunks {
  float* part = nullptr;
  int64_t max_rows = 0, max_chunks = 0, max_keys = 0;
  int64_t seqs = 0;  // sequences among the rows (0: not known), a hint for the kernel's build
};
size_t attention_chunk_bytes(int64_t max_rows, int64_t n_head, int64_t head_dim, int64_t max_keys);
// The kernel's builds give the same bits; -1 picks by shape, b forces build b (the contract compares them all).
int attention_builds();
// Reads TF_ATTN_BUILD now, so a bad value is refused at startup (tf::Error) rather than at the first launch.
void attention_read_switches();
const char* attention_build_name(int b);
// Whether build b runs a call of at most max_keys keys a row (forced where it does not, the shape's choice runs).
bool attention_build_takes(int b, int64_t max_keys);
void attention_force_build(int b);
// For tests: 1 asks L2 for a one-chunk call's keys before the wait, 0 never, -1 back to TF_ATTN_PULL (default on).
void attention_set_pull(int mode);
// Launches of the builds that give a row its own block (keys within one chunk), for the contract to see them run.
int64_t attention_one_row_launches();

// With xs/xsum, out is also written split for the output product (cuda_gemv.h SplitX, rows of n_head * head_dim).
void attention_mma(const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos, const int32_t* row_seq,
                   const PagedKv& kv, int64_t n_head, int64_t n_kv_head, int64_t head_dim, float scale, float* out,
                   void* xs = nullptr, float* xsum = nullptr, const AttnChunks& chunks = {});

// Prompt rows' attention at one fp16 mma a step (head size 64 or 128, any heads per KV head, compute capability 9.0):
// each row of Q and each key and value row rounded to fp16 under its own power of two, scores and P V as f32
// tensor-core chains over 32-key tiles at absolute positions, the online softmax in f32. A key past 2^64, a value past
// 2^30 or a non-finite element makes the rows that attend it NaN. Row-invariant, but not the bits of attention_mma.
bool attention_prompt_supports(int64_t head_dim, int64_t n_head, int64_t n_kv_head);
// Keys converted once a call instead of by each block (the same bits; null: by each block): sequence s's keys
// [0, keys[s]) at slots from slot[s] (a multiple of 64) of a scratch of [kv head][slot] fp16 keys, values, factors.
struct PromptKeys {
  void* scratch = nullptr;  // attention_prompt_keys_bytes(slots, ...)
  const int32_t* slot = nullptr;
  const int32_t* keys = nullptr;
  int64_t slots = 0;              // the scratch's capacity, which sets its strides
  int n_seqs = 0, max_tiles = 0;  // sequences, and the most 32-key tiles any of them holds
};
size_t attention_prompt_keys_bytes(int64_t slots, int64_t n_kv_head, int64_t head_dim);
int64_t attention_prompt_key_launches();  // for tests: calls that converted their keys once, in this process
// The layout on the host: rows' positions and sequences (0 .. n_seqs - 1) give each sequence's keys and first slot
// (whole pairs of 32-key tiles one after another, as the kernel reads them); returns the slots they take, and the most
// tiles of one in max_tiles.
inline int64_t prompt_key_layout(const int32_t* pos, const int32_t* row_seq, int64_t n_rows, int64_t n_seqs,
                                 int32_t* slot, int32_t* keys, int64_t& max_tiles) {
  for (int64_t s = 0; s < n_seqs; ++s) keys[s] = 0;
  for (int64_t r = 0; r < n_rows; ++r) keys[row_seq[r]] = keys[row_seq[r]] > pos[r] + 1 ? keys[row_seq[r]] : pos[r] + 1;
  int64_t slots = 0;
  max_tiles = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int64_t tiles = (int64_t(keys[s]) + 63) / 64 * 2;
    slot[s] = int32_t(slots < INT32_MAX ? slots : INT32_MAX);  // a round past int32 slots never fits the scratch
    slots += 32 * tiles, max_tiles = tiles > max_tiles ? tiles : max_tiles;
  }
  return slots;
}
void attention_prompt(const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos, const int32_t* row_seq,
                      const PagedKv& kv, int64_t n_head, int64_t n_kv_head, int64_t head_dim, float scale, float* out,
                      const PromptKeys* keys = nullptr);

}  // namespace tf::cuda
