// Tensor-core paged attention for every row count (decode, draft verify, prefill chunks): flash-style online softmax
// over 32-key blocks at absolute positions, Q K^T and P V as bf16 hi/lo mma products with f32 accumulation.
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <stdexcept>
#include <string>
#include <utility>

#include "backend/cuda/attention_mma_kernel.cuh"
#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_stream.cuh"
#include "base/env_switch.h"

namespace tf::cuda {
namespace {

// The kernel's builds: blocks an SM its registers allow, tiles a block, and whether a block holds one row.
struct Build {
  int blocks, tiles;
  bool one;
  const char* name;
};
constexpr Build kBuilds[] = {{1, 1, false, "one tile a block, one block an SM"},
                             {2, 1, false, "one tile a block, two blocks an SM"},
                             {2, 2, false, "two tiles a block, two blocks an SM"},
                             {1, 1, true, "a block a row of at most 256 keys"},
                             {2, 1, true, "a block a row of at most 256 keys, two blocks an SM"}};
constexpr int kNumBuilds = int(sizeof(kBuilds) / sizeof(kBuilds[0]));
constexpr int kOneBuild = 3, kOneBuild2 = 4;
static_assert(kBuilds[kOneBuild].one && kBuilds[kOneBuild2].one && kBuilds[kOneBuild2].blocks == 2);

std::atomic<int> g_force{-1};
std::atomic<int64_t> g_one_launches{0};

// A developer's choice for benchmarks (TF_ATTN_BUILD=<index>); the contract's forcing comes first.
int env_build() {
  static const int b = env_switch("TF_ATTN_BUILD", kNumBuilds, "an attention build for benchmarks; unset: by shape");
  return b;
}

// TF_ATTN_PULL=0: attention asks L2 for no keys or values before waiting on the kernel before it.
bool env_pull() {
  static const bool on = env_switch("TF_ATTN_PULL", 2, "0 pulls no keys into L2 before attention's wait") != 0;
  return on;
}
std::atomic<int> g_pull_set{-1};  // attention_set_pull's choice; -1: the environment's
bool pull_on() { return g_pull_set.load() >= 0 ? g_pull_set.load() == 1 : env_pull(); }

template <int D, int B, int T, bool One>
void launch_build(dim3 grid, const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos,
                  const int32_t* row_seq, const PagedKv& kv, int n_head, int n_kv_head, float scale, float* out,
                  uint4* xs, float* xsum, float* part, bool pull) {
  constexpr size_t bytes = sizeof(AttnSmem<D, T>);
  static const cudaError_t ready =
      cudaFuncSetAttribute(attention_mma_kernel<D, B, T, One>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  cuda_check(ready, "attention: shared memory");
  launch_k(attention_mma_kernel<D, B, T, One>, grid, kWarps * 32, bytes, q, q_stride, n_rows, pos, row_seq, kv, n_head,
           n_kv_head, scale, out, xs, xsum, part, pull);
}

// Build b's launcher at index b, straight from kBuilds.
template <int D, size_t... I>
constexpr std::array<decltype(&launch_build<D, 1, 1, false>), kNumBuilds> build_table(std::index_sequence<I...>) {
  return {launch_build<D, kBuilds[I].blocks, kBuilds[I].tiles, kBuilds[I].one>...};
}

}  // namespace

int attention_builds() { return kNumBuilds; }
void attention_read_switches() { env_build(), env_pull(); }
const char* attention_build_name(int b) { return b >= 0 && b < kNumBuilds ? kBuilds[b].name : "chosen by shape"; }
bool attention_build_takes(int b, int64_t max_keys) {
  return b >= 0 && b < kNumBuilds && (!kBuilds[b].one || (max_keys > 0 && max_keys <= kChunkKeys));
}
void attention_force_build(int b) { g_force.store(b >= 0 && b < kNumBuilds ? b : -1); }
void attention_set_pull(int mode) { g_pull_set.store(mode == 0 || mode == 1 ? mode : -1); }
int64_t attention_one_row_launches() { return g_one_launches.load(); }
bool attention_mma_supports(int64_t head_dim, int64_t n_head, int64_t n_kv_head) {
  return (head_dim == 64 || head_dim == 128) && n_kv_head > 0 && n_head % n_kv_head == 0 && n_head / n_kv_head <= 16;
}

void attention_mma(const float* q, int64_t q_stride, int64_t n_rows, const int32_t* pos, const int32_t* row_seq,
                   const PagedKv& kv, int64_t n_head, int64_t n_kv_head, int64_t head_dim, float scale, float* out,
                   void* xs, float* xsum, const AttnChunks& chunks) {
  if (!attention_mma_supports(head_dim, n_head, n_kv_head))
    throw std::runtime_error(
        "attention: the tensor-core kernel takes head size 64 or 128 and up to 16 heads per KV head");
  if (kv.page_size % 16 != 0)
    throw std::runtime_error("attention: the tensor-core kernel needs KV pages of a multiple of 16 tokens, not " +
                             std::to_string(kv.page_size));
  if (n_rows == 0) return;
  upload_control();
  const int64_t rt = 16 / (n_head / n_kv_head);
  // Few rows over several chunks: a block per chunk, then the combine kernel (the bits of the in-block walk).
  const int64_t n_chunks = (chunks.max_keys + kChunkKeys - 1) / kChunkKeys;
  const bool parallel = chunks.part && n_rows <= chunks.max_rows && n_chunks > 1;
  if (parallel && n_chunks > chunks.max_chunks)
    throw std::runtime_error("CUDA attention: more key chunks than the partials were sized for");
  float* part = parallel ? chunks.part : nullptr;
  // Prefill takes two tiles a block (keys loaded once for both); other grids past the SM count two blocks an SM.
  const int64_t sms = launch_device().sm_count;
  const int64_t tiles = (n_rows + rt - 1) / rt;
  // A block a row only where the call's keys (an upper bound on every row's) fit one chunk; forced elsewhere, by shape.
  const bool one_fits = chunks.max_keys > 0 && chunks.max_keys <= kChunkKeys;
  int b = g_force.load() >= 0 ? g_force.load() : env_build();
  if (b >= 0 && !attention_build_takes(b, chunks.max_keys)) b = -1;
  if (b < 0) {
    const bool runs = chunks.seqs > 0 && n_rows >= 2 * rt * chunks.seqs;
    // Rows each of its own sequence past a wave: a tile walks their passes in turn, so a block a row at two an SM.
    const bool own = chunks.seqs >= n_rows && n_rows * n_kv_head <= 8 * sms;
    b = one_fits && n_rows * n_kv_head <= sms               ? kOneBuild
        : one_fits && own                                   ? kOneBuild2
        : !parallel && runs && tiles / 2 * n_kv_head >= sms ? 2
                                                            : tiles * n_kv_head * (parallel ? n_chunks : 1) > sms;
  }
  const int T = kBuilds[b].tiles;
  const int64_t blocks_x = kBuilds[b].one ? n_rows : (tiles + T - 1) / T;
  const dim3 grid(unsigned(blocks_x), unsigned(n_kv_head), unsigned(parallel && !kBuilds[b].one ? n_chunks : 1));
  if (kBuilds[b].one) g_one_launches.fetch_add(1);
  auto* x4 = static_cast<uint4*>(xs);
  // Keys and values pulled into L2 before the wait only within one chunk: past it they take DRAM from the product.
  const bool pull = pull_on() && one_fits;
  auto go = [&](auto launch) {
    launch(grid, q, q_stride, n_rows, pos, row_seq, kv, int(n_head), int(n_kv_head), scale, out, x4, xsum, part, pull);
  };
  if (head_dim == 64)
    go(build_table<64>(std::make_index_sequence<kNumBuilds>{})[size_t(b)]);
  else
    go(build_table<128>(std::make_index_sequence<kNumBuilds>{})[size_t(b)]);
  if (parallel && !kBuilds[b].one) {
    const int64_t warps = n_rows * n_head * (head_dim / 32);
    const unsigned blocks = unsigned((warps + 3) / 4);
    if (head_dim == 64)
      launch_k(attention_combine_kernel<64>, blocks, 128, 0, part, n_rows, pos, int(n_head), n_chunks, out, x4, xsum);
    else
      launch_k(attention_combine_kernel<128>, blocks, 128, 0, part, n_rows, pos, int(n_head), n_chunks, out, x4, xsum);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA attention: ") + cudaGetErrorString(e));
}

size_t attention_chunk_bytes(int64_t max_rows, int64_t n_head, int64_t head_dim, int64_t max_keys) {
  return size_t(max_rows * n_head * ((max_keys + kChunkKeys - 1) / kChunkKeys) * (head_dim + 2)) * sizeof(float);
}

}  // namespace tf::cuda
