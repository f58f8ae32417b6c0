#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_ctl.cuh"
#include "backend/cuda/cuda_sample.h"
#include "backend/cuda/cuda_stream.cuh"

// Two kernels per logits row: blocks over fixed 4096-logit chunks (their count depends on the vocabulary only) each
// find their chunk's best, sums and top candidates; one block per row merges them in chunk order.
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
  float logit[kCandidates];  // the chunk's top candidates in id order
  int32_t id[kCandidates];
};

__device__ Best block_best(Best b, Best* sh) {
  sh[threadIdx.x] = b;
  __syncthreads();
  for (int s = kT / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s && better(sh[threadIdx.x + s], sh[threadIdx.x])) sh[threadIdx.x] = sh[threadIdx.x + s];
    __syncthreads();
  }
  Best r = sh[0];
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

// Exclusive count of flagged threads before this one, and the block's total (two barriers).
__device__ int block_rank(bool flag, int& total, int* wsum) {
  const unsigned bal = __ballot_sync(0xffffffffu, flag);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) wsum[warp] = __popc(bal);
  __syncthreads();
  int before = __popc(bal & ((1u << lane) - 1u));
  total = 0;
  for (int w = 0; w < kT / 32; ++w) {
    if (w < warp) before += wsum[w];
    total += wsum[w];
  }
  __syncthreads();
  return before;
}

struct Shared {
  uint32_t hist[256];
  int32_t wsum[kT / 32];
  uint32_t bin, above, at_bin;  // at_bin after the last pass: how many keys equal the cut
};

// The `want` largest of src's entries by (logit desc, id asc), written in src order (src is in id order): a radix
// select of the want-th key eight bits at a time, then one ordered pass that keeps the lowest ids among its ties.
template <class Src>
__device__ void select_top(const Src& src, int64_t count, int64_t want, float* ol, int32_t* oi, Shared& sh) {
  uint32_t prefix = 0, mask = 0;
  int64_t remaining = want;
  for (int shift = 24; shift >= 0; shift -= 8) {
    sh.hist[threadIdx.x] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < count; i += kT) {
      // One atomic per distinct bin in the warp: logits crowd a few bins, and one add per key serialises there.
      const uint32_t k = key_of(src.logit(i));
      const bool in = src.valid(i) && (k & mask) == prefix;
      const uint32_t bin = in ? (k >> shift) & 255 : 256u;
      const unsigned peers = __match_any_sync(__activemask(), bin);
      if (in && (threadIdx.x & 31) == unsigned(__ffs(int(peers)) - 1))
        atomicAdd(&sh.hist[bin], unsigned(__popc(peers)));
    }
    __syncthreads();
    // Thread b: keys in bins >= b (a suffix sum over the warps, high bins first); the cut is the highest such bin
    // that holds the remaining ones.
    const int b = threadIdx.x;
    uint32_t incl = sh.hist[b];
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t v = __shfl_down_sync(0xffffffffu, incl, o);
      if ((b & 31) + o < 32) incl += v;
    }
    if ((b & 31) == 0) sh.wsum[b >> 5] = int32_t(incl);
    __syncthreads();
    for (int w = (b >> 5) + 1; w < kT / 32; ++w) incl += uint32_t(sh.wsum[w]);
    const uint32_t next = __shfl_down_sync(0xffffffffu, incl, 1);
    const uint32_t incl_next = b == 255 ? 0u : (b & 31) == 31 ? incl - sh.hist[b] : next;
    if (int64_t(incl) >= remaining && (b == 255 || int64_t(incl_next) < remaining))
      sh.bin = b, sh.above = incl_next, sh.at_bin = sh.hist[b];
    __syncthreads();
    prefix |= sh.bin << shift;
    mask |= 255u << shift;
    remaining -= sh.above;
    __syncthreads();
  }
  int64_t ties = 0, n = 0;
  for (int64_t t0 = 0; t0 < count; t0 += kT) {
    const int64_t i = t0 + threadIdx.x;
    const bool ok = i < count && src.valid(i);
    const uint32_t k = ok ? key_of(src.logit(i)) : 0u;
    const bool eq = ok && k == prefix;
    int n_eq = 0, n_sel = 0;
    const int r_eq = block_rank(eq, n_eq, sh.wsum);
    const int64_t rank = ties + r_eq;  // planted: the highest ids among the ties instead of the lowest
    const bool sel =
        ok && (k > prefix || (eq && (TF_DCTL(163) ? rank >= int64_t(sh.at_bin) - remaining : rank < remaining)));
    const int r_sel = block_rank(sel, n_sel, sh.wsum);
    if (sel && n + r_sel < want) ol[n + r_sel] = src.logit(i), oi[n + r_sel] = src.id(i);
    ties += n_eq, n += n_sel;
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
  __shared__ Best sb[kT];
  __shared__ double sd[kT];
  __shared__ Shared sh;
  const int64_t nb = gridDim.x, c0 = int64_t(blockIdx.x) * kChunk, c1 = c0 + kChunk < V ? c0 + kChunk : V;
  const float* l = logits + int64_t(blockIdx.y) * V;
  const SampleRow p = params[blockIdx.y];
  Part& o = parts[blockIdx.y * nb + blockIdx.x];
  Best g{-INFINITY, -INFINITY, INT32_MAX};
  for (int64_t v = c0 + threadIdx.x; v < c1; v += kT) {
    Best c{double(l[v]), l[v], int32_t(v)};
    if (better(c, g)) g = c;
  }
  g = block_best(g, sb);
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
    gb = block_best(gb, sb);
  }
  const int64_t want = c1 - c0 < kCandidates ? c1 - c0 : kCandidates;
  select_top(ChunkSrc{l, c0}, c1 - c0, want, o.logit, o.id, sh);
  if (threadIdx.x == 0) o.g = g, o.gb = gb, o.s = s, o.st = st, o.n = int32_t(want);
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

__global__ void __launch_bounds__(kT)
    merge_kernel(int64_t V, const SampleRow* params, const Part* parts, RowCandidatesDev* out) {
  grid_wait();
  extern __shared__ float staged[];
  __shared__ int32_t n[kMaxChunks];
  __shared__ Shared sh;
  __shared__ Best sb[kT];
  __shared__ struct {
    bool skip;
    double s, st, f, ft;  // the chunk's sums and their factors to the row's maximum
  } term[kMaxChunks];
  const int64_t nb = (V + kChunk - 1) / kChunk;
  const Part* pr = parts + blockIdx.x * nb;
  const SampleRow p = params[blockIdx.x];
  RowCandidatesDev& o = out[blockIdx.x];
  for (int64_t b = threadIdx.x; b < nb; b += kT) n[b] = pr[b].n;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < nb * kCandidates; i += kT)
    staged[i] = (i % kCandidates) < n[i / kCandidates] ? pr[i / kCandidates].logit[i % kCandidates] : 0.0f;
  __syncthreads();
  const int64_t want = V < kCandidates ? V : kCandidates;
  select_top(PartSrc{pr, staged, n}, nb * kCandidates, want, o.logit, o.id, sh);
  // Bests under a total order (any merge order), each chunk's factor in parallel, the terms added in chunk order.
  Best g{-INFINITY, -INFINITY, INT32_MAX}, gb = g;
  for (int64_t b = threadIdx.x; b < nb; b += kT) {
    if (better(pr[b].g, g)) g = pr[b].g;
    if (better(pr[b].gb, gb)) gb = pr[b].gb;
  }
  g = block_best(g, sb);
  gb = block_best(gb, sb);
  const double max_t = p.temperature > 0 ? g.v / p.temperature : 0;
  for (int64_t b = threadIdx.x; b < nb; b += kT) {
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
    cudaError_t a = cudaFuncSetAttribute(merge_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(staged));
    if (a != cudaSuccess) throw std::runtime_error(std::string("CUDA candidates: ") + cudaGetErrorString(a));
    allowed = staged;
  }
  launch_k(merge_kernel, unsigned(n_rows), kT, staged, n_vocab, params, parts, out);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA candidates: ") + cudaGetErrorString(e));
}

}  // namespace tf::cuda
