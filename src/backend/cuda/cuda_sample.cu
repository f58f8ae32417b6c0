#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_ctl.cuh"
#include "backend/cuda/cuda_sample.h"
#include "backend/cuda/cuda_stream.cuh"

// Two kernels per logits row: blocks over fixed 4096-logit chunks (their count depends on the vocabulary only) each
// find their chunk's best, NaN flag, sums and top candidates (an argmax row: best and flag only); one block per row
// merges them in chunk order.
namespace tf::cuda {
namespace {

constexpr int kT = 256;
constexpr int64_t kChunk = 4096;

// The same splitmix64 keyed draw as engine/sampler.cpp.
__device__ uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__device__ double gumbel(uint64_t seed, int64_t pos, int32_t token) {
  uint64_t h = mix(seed + 0x9E3779B97F4A7C15ull);
  h = mix(h ^ (uint64_t(pos) * 0xD1B54A32D192ED03ull));
  h = mix(h ^ (uint64_t(uint32_t(token)) * 0x8CB92BA72F3D8DD7ull));
  const double u = (double(h >> 11) + 0.5) * 0x1.0p-53;
  return -log(-log(u));
}

// Order-preserving map of a float to an unsigned key.
__device__ uint32_t key_of(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Best of (value desc, tie-break logit desc, id asc): a total order, so no merge order changes the result.
struct Best {
  double v;
  float l;
  int32_t id;
};
__device__ bool better(const Best& a, const Best& b) {
  if (a.v != b.v) return a.v > b.v;
  if (a.l != b.l) return a.l > b.l;
  return TF_DCTL(162) ? a.id > b.id : a.id < b.id;  // planted: ties go to the higher id
}

struct Part {  // one chunk's share of a row
  Best g, gb;
  double s, st;  // sum of exp(l - g.v) and of exp(l/T - g.v/T) over the chunk (0 when g.v is -inf)
  int32_t n;
  int32_t nan;               // a NaN in the chunk
  float logit[kCandidates];  // the chunk's top candidates in id order
  int32_t id[kCandidates];
};

__device__ Best shfl_best(const Best& b, int lane_mask) {
  return {__shfl_xor_sync(0xffffffffu, b.v, lane_mask), __shfl_xor_sync(0xffffffffu, b.l, lane_mask),
          __shfl_xor_sync(0xffffffffu, b.id, lane_mask)};
}
// The block's best by warp shuffles, then the warps' bests in order: one Best of shared memory per warp.
template <int NT>
__device__ Best block_best(Best b, Best* sh) {
  for (int m = 16; m > 0; m >>= 1) {
    const Best o = shfl_best(b, m);
    if (better(o, b)) b = o;
  }
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = b;
  __syncthreads();
  Best r = sh[0];
  for (int w = 1; w < NT / 32; ++w)
    if (better(sh[w], r)) r = sh[w];
  __syncthreads();
  return r;
}

__device__ double block_sum(double x, double* sh) {
  sh[threadIdx.x] = x;
  __syncthreads();
  for (int s = kT / 2; s > 0; s >>= 1) {  // fixed tree: depends on the block size only
    if (int(threadIdx.x) < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  double r = sh[0];
  __syncthreads();
  return r;
}

constexpr int kMergeT = 1024;  // the merge's one block per row has its SM alone: more warps hide its latencies

struct Shared {
  uint32_t hist[256];
  int32_t wsum[256 / 32];
  int32_t seg_eq[kMergeT / 32], seg_gt[kMergeT / 32];  // per warp's segment: keys equal to the cut and above it
  uint32_t bin, above, at_bin;                         // at_bin after the last pass: how many keys equal the cut
};

// The `want` largest of src's entries by (logit desc, id asc), written in src order (src is in id order): a radix
// select of the want-th key eight bits at a time, then one ordered pass that keeps the lowest ids among its ties.
template <int NT, class Src>
__device__ void select_top(const Src& src, int64_t count, int64_t want, float* ol, int32_t* oi, Shared& sh) {
  static_assert(NT % 256 == 0 && NT <= kMergeT);
  uint32_t prefix = 0, mask = 0;
  int64_t remaining = want;
  const int b = threadIdx.x;  // threads 0-255 own a histogram bin each
  for (int shift = 24; shift >= 0; shift -= 8) {
    if (b < 256) sh.hist[b] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < count; i += NT) {
      // One atomic per distinct bin in the warp: logits crowd a few bins, and one add per key serialises there.
      const uint32_t k = key_of(src.logit(i));
      const bool in = src.valid(i) && (k & mask) == prefix;
      const uint32_t bin = in ? (k >> shift) & 255 : 256u;
      const unsigned peers = __match_any_sync(__activemask(), bin);
      if (in && (threadIdx.x & 31) == unsigned(__ffs(int(peers)) - 1))
        atomicAdd(&sh.hist[bin], unsigned(__popc(peers)));
    }
    __syncthreads();
    // Bin b: keys in bins >= b (a suffix sum over the warps, high bins first); the cut is the highest such bin that
    // holds the remaining ones.
    uint32_t incl = 0;
    if (b < 256) {
      incl = sh.hist[b];
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t v = __shfl_down_sync(0xffffffffu, incl, o);
        if ((b & 31) + o < 32) incl += v;
      }
      if ((b & 31) == 0) sh.wsum[b >> 5] = int32_t(incl);
    }
    __syncthreads();
    if (b < 256) {
      for (int w = (b >> 5) + 1; w < 256 / 32; ++w) incl += uint32_t(sh.wsum[w]);
      const uint32_t next = __shfl_down_sync(0xffffffffu, incl, 1);
      const uint32_t incl_next = b == 255 ? 0u : (b & 31) == 31 ? incl - sh.hist[b] : next;
      if (int64_t(incl) >= remaining && (b == 255 || int64_t(incl_next) < remaining))
        sh.bin = b, sh.above = incl_next, sh.at_bin = sh.hist[b];
    }
    __syncthreads();
    prefix |= sh.bin << shift;
    mask |= 255u << shift;
    remaining -= sh.above;
    __syncthreads();
  }
  // The picks in src order: each warp takes one contiguous segment, counts its ties and keys above the cut, then
  // writes its picks after those of the warps before it, ranking within the warp by ballot.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned before = (1u << lane) - 1u;
  const int64_t seg = (count + NT / 32 - 1) / (NT / 32);
  const int64_t s0 = min(count, warp * seg), s1 = min(count, s0 + seg);
  auto key_at = [&](int64_t i, bool& ok) {
    ok = i < s1 && src.valid(i);
    return ok ? key_of(src.logit(i)) : 0u;
  };
  int32_t n_eq = 0, n_gt = 0;
  for (int64_t i0 = s0; i0 < s1; i0 += 32) {
    bool ok;
    const uint32_t k = key_at(i0 + lane, ok);
    n_eq += __popc(__ballot_sync(0xffffffffu, ok && k == prefix));
    n_gt += __popc(__ballot_sync(0xffffffffu, ok && k > prefix));
  }
  if (lane == 0) sh.seg_eq[warp] = n_eq, sh.seg_gt[warp] = n_gt;
  __syncthreads();
  int64_t ties = 0, n = 0;
  for (int w = 0; w < warp; ++w) ties += sh.seg_eq[w], n += sh.seg_gt[w];
  const int64_t skip = int64_t(sh.at_bin) - remaining;  // planted 163 keeps the ties ranked from here on
  n += TF_DCTL(163) ? (ties > skip ? ties - skip : 0) : (ties < remaining ? ties : remaining);
  for (int64_t i0 = s0; i0 < s1; i0 += 32) {
    bool ok;
    const uint32_t k = key_at(i0 + lane, ok);
    const bool eq = ok && k == prefix;
    const unsigned eb = __ballot_sync(0xffffffffu, eq);
    const int64_t rank = ties + __popc(eb & before);  // planted: the highest ids among the ties instead of the lowest
    const bool sel = ok && (k > prefix || (eq && (TF_DCTL(163) ? rank >= skip : rank < remaining)));
    const unsigned sb = __ballot_sync(0xffffffffu, sel);
    const int64_t at = n + __popc(sb & before);
    if (sel && at < want) ol[at] = src.logit(i0 + lane), oi[at] = src.id(i0 + lane);
    ties += __popc(eb), n += __popc(sb);
  }
}

struct ChunkSrc {
  const float* l;
  int64_t c0;
  __device__ bool valid(int64_t) const { return true; }
  __device__ float logit(int64_t i) const { return l[c0 + i]; }
  __device__ int32_t id(int64_t i) const { return int32_t(c0 + i); }
};

__global__ void __launch_bounds__(kT)
    chunk_kernel(const float* logits, int64_t V, const SampleRow* params, Part* parts) {
  grid_wait();
  __shared__ Best sb[kT / 32];
  __shared__ double sd[kT];
  __shared__ Shared sh;
  const int64_t nb = gridDim.x, c0 = int64_t(blockIdx.x) * kChunk, c1 = c0 + kChunk < V ? c0 + kChunk : V;
  const float* l = logits + int64_t(blockIdx.y) * V;
  const SampleRow p = params[blockIdx.y];
  Part& o = parts[blockIdx.y * nb + blockIdx.x];
  Best g{-INFINITY, -INFINITY, INT32_MAX};
  bool nan = false;
  for (int64_t v = c0 + threadIdx.x; v < c1; v += kT) {
    Best c{double(l[v]), l[v], int32_t(v)};
    if (better(c, g)) g = c;
    nan |= isnan(l[v]);
  }
  g = block_best<kT>(g, sb);
  nan = __syncthreads_or(nan) != 0 && !(TF_DCTL(164) && !p.candidates);  // planted: an argmax row's NaN unseen
  if (!p.candidates) {  // a greedy row without logprobs: its argmax and NaN flag are all the merge reads
    if (threadIdx.x == 0) o.g = g, o.gb = g, o.s = 0, o.st = 0, o.n = 0, o.nan = nan;
    return;
  }
  double s = 0;
  if (g.v != -INFINITY)
    for (int64_t v = c0 + threadIdx.x; v < c1; v += kT)
      s += TF_DCTL(161) ? double(expf(l[v] - float(g.v))) : exp(double(l[v]) - g.v);  // planted: float exp
  s = block_sum(s, sd);
  Best gb{-INFINITY, -INFINITY, INT32_MAX};
  double st = 0;
  if (p.temperature > 0) {
    const double mt = g.v / p.temperature;
    for (int64_t v = c0 + threadIdx.x; v < c1; v += kT) {
      const double sc = double(l[v]) / p.temperature;
      if (g.v != -INFINITY) st += exp(sc - mt);
      Best c{sc + gumbel(p.seed, p.pos, int32_t(v)), l[v], int32_t(v)};
      if (better(c, gb)) gb = c;
    }
    st = block_sum(st, sd);
    gb = block_best<kT>(gb, sb);
  }
  const int64_t want = c1 - c0 < kCandidates ? c1 - c0 : kCandidates;
  select_top<kT>(ChunkSrc{l, c0}, c1 - c0, want, o.logit, o.id, sh);
  if (threadIdx.x == 0) o.g = g, o.gb = gb, o.s = s, o.st = st, o.n = int32_t(want), o.nan = nan;
}

struct PartSrc {  // the chunks' candidates, their logits staged in shared memory
  const Part* parts;
  const float* logits;  // [chunks * kCandidates], shared
  const int32_t* n;     // per chunk, shared
  __device__ bool valid(int64_t i) const { return (i % kCandidates) < n[i / kCandidates]; }
  __device__ float logit(int64_t i) const { return logits[i]; }
  __device__ int32_t id(int64_t i) const { return parts[i / kCandidates].id[i % kCandidates]; }
};

constexpr int kMaxChunks = int(kMaxSampledVocab / kChunk);  // 1 KB of staged logits each, within 227 KB

__global__ void __launch_bounds__(kMergeT)
    merge_kernel(int64_t V, const SampleRow* params, const Part* parts, RowCandidatesDev* out) {
  grid_wait();
  extern __shared__ float staged[];
  __shared__ int32_t n[kMaxChunks];
  __shared__ Shared sh;
  __shared__ Best sb[kMergeT / 32];
  __shared__ struct {
    bool skip;
    double s, st, f, ft;  // the chunk's sums and their factors to the row's maximum
  } term[kMaxChunks];
  const int64_t nb = (V + kChunk - 1) / kChunk;
  const Part* pr = parts + blockIdx.x * nb;
  const SampleRow p = params[blockIdx.x];
  RowCandidatesDev& o = out[blockIdx.x];
  if (!p.candidates) {  // argmax only: the chunks' bests under the total order, and whether any chunk saw a NaN
    Best g{-INFINITY, -INFINITY, INT32_MAX};
    bool nan = false;
    for (int64_t b = threadIdx.x; b < nb - (TF_DCTL(165) ? 1 : 0); b += kMergeT) {  // planted: the last chunk unread
      if (better(pr[b].g, g)) g = pr[b].g;
      nan |= pr[b].nan != 0;
    }
    g = block_best<kMergeT>(g, sb);
    nan = __syncthreads_or(nan) != 0;
    if (threadIdx.x == 0)
      o.greedy = o.gumbel = g.id, o.gumbel_logit = g.l, o.n = 0, o.lse = o.max_t = o.sum_t = 0, o.nan = nan;
    return;
  }
  for (int64_t b = threadIdx.x; b < nb; b += kMergeT) n[b] = pr[b].n;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < nb * kCandidates; i += kMergeT)
    staged[i] = (i % kCandidates) < n[i / kCandidates] ? pr[i / kCandidates].logit[i % kCandidates] : 0.0f;
  __syncthreads();
  const int64_t want = V < kCandidates ? V : kCandidates;
  select_top<kMergeT>(PartSrc{pr, staged, n}, nb * kCandidates, want, o.logit, o.id, sh);
  // Bests under a total order (any merge order), each chunk's factor in parallel, the terms added in chunk order.
  Best g{-INFINITY, -INFINITY, INT32_MAX}, gb = g;
  bool nan = false;
  for (int64_t b = threadIdx.x; b < nb; b += kMergeT) {
    if (better(pr[b].g, g)) g = pr[b].g;
    if (better(pr[b].gb, gb)) gb = pr[b].gb;
    nan |= pr[b].nan != 0;
  }
  g = block_best<kMergeT>(g, sb);
  gb = block_best<kMergeT>(gb, sb);
  nan = __syncthreads_or(nan) != 0;
  const double max_t = p.temperature > 0 ? g.v / p.temperature : 0;
  for (int64_t b = threadIdx.x; b < nb; b += kMergeT) {
    const double v = pr[b].g.v;
    term[b] = {v == -INFINITY, pr[b].s, pr[b].st, v == -INFINITY ? 0.0 : exp(v - g.v),
               v == -INFINITY || !(p.temperature > 0) ? 0.0 : exp(v / p.temperature - max_t)};
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0, st = 0;
    for (int64_t b = 0; b < nb; ++b) {
      if (term[b].skip) continue;
      s += term[b].s * term[b].f;
      if (p.temperature > 0) st += term[b].st * term[b].ft;
    }
    o.greedy = g.id;
    o.gumbel = p.temperature > 0 ? gb.id : g.id;
    o.gumbel_logit = p.temperature > 0 ? gb.l : g.l;
    o.n = int32_t(want);
    o.lse = g.v + log(s);
    o.max_t = max_t;
    o.sum_t = st;
    o.nan = nan;
  }
}

}  // namespace

size_t candidates_scratch_bytes(int64_t n_rows, int64_t n_vocab) {
  return size_t(n_rows) * size_t((n_vocab + kChunk - 1) / kChunk) * sizeof(Part);
}

void candidates(const float* logits, int64_t n_rows, int64_t n_vocab, const SampleRow* params, RowCandidatesDev* out,
                void* scratch) {
  if (n_rows == 0) return;
  const int64_t nb = (n_vocab + kChunk - 1) / kChunk;
  if (nb > kMaxChunks) throw std::runtime_error("CUDA candidates: vocabulary larger than 819,200 entries");
  if (n_rows > 65535) throw std::runtime_error("CUDA candidates: more than 65535 rows in one call");
  upload_control();
  auto* parts = static_cast<Part*>(scratch);
  launch_k(chunk_kernel, dim3(unsigned(nb), unsigned(n_rows)), kT, 0, logits, n_vocab, params, parts);
  const size_t staged = size_t(nb) * kCandidates * sizeof(float);
  static size_t allowed = 0;  // the default allows 48 KB less the static arrays: set the dynamic size explicitly
  if (staged > allowed) {
    cuda_check(cudaFuncSetAttribute(merge_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(staged)),
               "candidates: shared memory");
    allowed = staged;
  }
  launch_k(merge_kernel, unsigned(n_rows), kMergeT, staged, n_vocab, params, parts, out);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA candidates: ") + cudaGetErrorString(e));
}

}  // namespace tf::cuda
