// One-row Q, K and V in one launch (mma_group_kernel): the format pairs a llama layer holds, instantiated apart.
#include "backend/cuda/cuda_ctl.cuh"
#include "backend/cuda/mma_kernels.cuh"
#include "backend/cuda/rope_ops.cuh"

namespace tf::cuda {
namespace {

// rope_store's work on one 16-output tile of the row: Q rotated into its output, K rotated and V into the row's page
// slot, each value by rope_store's float steps on the same inputs (NORM pairs lie within a tile).
__device__ __forceinline__ void group_rope_store(const MmaGroup& G, int i, int64_t tile0, float tot, float* sm) {
  const RopeKv& R = G.rope;
  const MmaArgs& A = G.a[i];
  [[maybe_unused]] const int ctl = A.ctl;
  int64_t o = 0, row = 1;
  if (threadIdx.x < 128) mma_block_at<1, 1>(int(threadIdx.x), tile0, o, row);
  if (row == 0) sm[o - tile0 * 16] = tot;
  __syncthreads();
  const int j = int(threadIdx.x);
  const int64_t at = tile0 * 16 + j;
  if (j >= 16 || at >= A.w.n_out) return;
  float v = sm[j];
  const int hj = int(at % R.head_dim);
  if (i < 2 && hj < 2 * R.half) {
    const float2 y = rope_rotate(sm[j & ~1], sm[j | 1], R.cos[hj / 2], R.sin[hj / 2]);
    v = j & 1 ? y.y : y.x;
  }
  if (i == 0) {
    A.y[at] = v;
    return;
  }
  float* kp = kv_slot(R.pos, R.row_seq, 0, R.page_table, R.max_pages, R.base, R.page_floats, R.layer_offset,
                      R.page_size, R.kv_row);
  const bool value = i == 2 && !TF_MCTL(178);  // planted: V written over the row's K
  kp[(value ? R.page_size * R.kv_row : 0) + at] = v;
}

// A block per 16 outputs of any of the group's products (formats TA or TB), one row.
template <int TA, int TB, bool kRope>
__global__ void __launch_bounds__(256, 2) mma_group_kernel(MmaGroup G) {
  if (!G.a[0].prewait) grid_wait();
  extern __shared__ float sm_part[];
  [[maybe_unused]] const int ctl = G.a[0].ctl;
  const int64_t b = blockIdx.x, join = TF_MCTL(177) ? 1 : 0;  // planted: a join's first block counted to the one before
  int i = 0;
  while (i + 1 < G.count && b >= G.end[i] + join) ++i;
  const MmaArgs& A = G.a[i];
  const int64_t tile0 = b - (i > 0 ? G.end[i - 1] : 0);
  float tot[1];
  if (int(A.w.type) == TA)
    mma_block_sum<TA, 1, 1, true>(A, tile0, sm_part, tot);
  else if constexpr (TA != TB)
    mma_block_sum<TB, 1, 1, true>(A, tile0, sm_part, tot);
  if constexpr (kRope)
    group_rope_store(G, i, tile0, tot[0], sm_part);
  else
    mma_block_store<1, 1>(A, tile0, tot);
}

template <int TA, int TB>
void launch_group(const MmaGroup& g) {
  upload_control();
  const size_t smem = size_t(g.a[0].round) * 128 * sizeof(float);
  launch_k(g.rope.on ? mma_group_kernel<TA, TB, true> : mma_group_kernel<TA, TB, false>, unsigned(g.end[g.count - 1]),
           256, smem, g);
}

}  // namespace

// a and b: the two formats the group's matrices take (equal when they all share one); false if none is built for them.
bool mma_kernels_group(const MmaGroup& g, GgmlType a, GgmlType b) {
  constexpr int q4k = int(GgmlType::Q4_K), q6k = int(GgmlType::Q6_K);
  if (a != b) {
    if ((a == GgmlType::Q4_K && b == GgmlType::Q6_K) || (a == GgmlType::Q6_K && b == GgmlType::Q4_K)) {
      launch_group<q4k, q6k>(g);  // Q4_K_M's Q and K with a Q6_K V
      return true;
    }
    return false;
  }
  switch (a) {
    case GgmlType::Q4_0:
      launch_group<int(GgmlType::Q4_0), int(GgmlType::Q4_0)>(g);
      return true;
    case GgmlType::Q4_1:
      launch_group<int(GgmlType::Q4_1), int(GgmlType::Q4_1)>(g);
      return true;
    case GgmlType::Q8_0:
      launch_group<int(GgmlType::Q8_0), int(GgmlType::Q8_0)>(g);
      return true;
    case GgmlType::Q4_K:
      launch_group<q4k, q4k>(g);
      return true;
    case GgmlType::Q6_K:
      launch_group<q6k, q6k>(g);
      return true;
    case GgmlType::BF16:
      launch_group<int(GgmlType::BF16), int(GgmlType::BF16)>(g);
      return true;
    default:
      return false;
  }
}

}  // namespace tf::cuda
