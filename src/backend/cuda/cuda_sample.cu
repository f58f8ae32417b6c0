#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_ctl.cuh"
#include "backend/cuda/cuda_sample.h"
#include "backend/cuda/cuda_stream.cuh"

namespace tf::cuda {
namespace {

constexpr int kT = 1024;

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

// Best of (value desc, tie-break logit desc, id asc) across the block; thread order never matters.
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

__global__ void __launch_bounds__(kT)
    candidates_kernel(const float* logits, int64_t V, const SampleRow* params, RowCandidatesDev* out) {
  __shared__ Best sb[kT];
  __shared__ double sd[kT];
  __shared__ uint32_t hist[256];
  __shared__ int32_t n_out, warp_count[kT / 32];
  const float* l = logits + int64_t(blockIdx.x) * V;
  const SampleRow p = params[blockIdx.x];
  RowCandidatesDev& o = out[blockIdx.x];

  Best g{-INFINITY, -INFINITY, INT32_MAX};
  for (int64_t v = threadIdx.x; v < V; v += kT) {
    Best c{double(l[v]), l[v], int32_t(v)};
    if (better(c, g)) g = c;
  }
  g = block_best(g, sb);
  double s = 0;
  for (int64_t v = threadIdx.x; v < V; v += kT)
    s += TF_DCTL(161) ? double(expf(l[v] - float(g.v))) : exp(double(l[v]) - g.v);  // planted: float exp
  const double lse = g.v + log(block_sum(s, sd));
  Best gb{-INFINITY, -INFINITY, INT32_MAX};
  double max_t = 0, sum_t = 0;
  if (p.temperature > 0) {
    max_t = g.v / p.temperature;
    double st = 0;
    for (int64_t v = threadIdx.x; v < V; v += kT) {
      const double sc = double(l[v]) / p.temperature;
      st += exp(sc - max_t);
      Best c{sc + gumbel(p.seed, p.pos, int32_t(v)), l[v], int32_t(v)};
      if (better(c, gb)) gb = c;
    }
    sum_t = block_sum(st, sd);
    gb = block_best(gb, sb);
  }

  // Radix select of the kCandidates-th largest key, eight bits at a time from the top.
  const int64_t want = V < kCandidates ? V : kCandidates;
  uint32_t prefix = 0, mask = 0;
  int64_t remaining = want;
  for (int shift = 24; shift >= 0; shift -= 8) {
    if (threadIdx.x < 256) hist[threadIdx.x] = 0;
    __syncthreads();
    for (int64_t v = threadIdx.x; v < V; v += kT) {
      // One atomic per distinct bin in the warp: logits crowd a few bins, and one add per key serialises there.
      const uint32_t k = key_of(l[v]);
      const bool in = (k & mask) == prefix;
      const uint32_t bin = in ? (k >> shift) & 255 : 256u;
      const unsigned peers = __match_any_sync(__activemask(), bin);
      if (in && (threadIdx.x & 31) == unsigned(__ffs(int(peers)) - 1)) atomicAdd(&hist[bin], unsigned(__popc(peers)));
    }
    __syncthreads();
    int64_t above = 0;
    int bin = 0;
    for (bin = 255; bin > 0; --bin) {  // every thread walks the same shared histogram
      if (above + int64_t(hist[bin]) >= remaining) break;
      above += hist[bin];
    }
    prefix |= uint32_t(bin) << shift;
    mask |= 255u << shift;
    remaining -= above;
    __syncthreads();
  }
  if (threadIdx.x == 0) n_out = 0;
  __syncthreads();
  for (int64_t v = threadIdx.x; v < V; v += kT) {
    if (key_of(l[v]) > prefix || (TF_DCTL(163) && key_of(l[v]) == prefix)) {  // planted: ties taken in any order
      const int32_t at = atomicAdd(&n_out, 1);
      o.logit[at] = l[v], o.id[at] = int32_t(v);
    }
  }
  __syncthreads();
  // Keys equal to the threshold: the lowest ids, found tile by tile with a block-wide scan in id order.
  const int32_t base_out = n_out;
  int64_t taken = 0;
  for (int64_t t0 = 0; t0 < V && taken < remaining; t0 += kT) {
    const int64_t v = t0 + threadIdx.x;
    const bool eq = v < V && key_of(l[v]) == prefix;
    const unsigned ballot = __ballot_sync(0xffffffffu, eq);
    if ((threadIdx.x & 31) == 0) warp_count[threadIdx.x / 32] = __popc(ballot);
    __syncthreads();
    int64_t before = 0, total = 0;
    for (int w = 0; w < kT / 32; ++w) {
      if (w < int(threadIdx.x / 32)) before += warp_count[w];
      total += warp_count[w];
    }
    before += __popc(ballot & ((1u << (threadIdx.x & 31)) - 1u));
    if (eq && taken + before < remaining) {
      o.logit[base_out + taken + before] = l[v];
      o.id[base_out + taken + before] = int32_t(v);
    }
    taken += total;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    o.greedy = g.id;
    o.gumbel = p.temperature > 0 ? gb.id : g.id;
    o.gumbel_logit = p.temperature > 0 ? gb.l : g.l;
    o.n = int32_t(want);
    o.lse = lse;
    o.max_t = max_t;
    o.sum_t = sum_t;
  }
}

}  // namespace

void candidates(const float* logits, int64_t n_rows, int64_t n_vocab, const SampleRow* params, RowCandidatesDev* out) {
  if (n_rows == 0) return;
  upload_control();
  candidates_kernel<<<unsigned(n_rows), kT, 0, launch_stream()>>>(logits, n_vocab, params, out);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA candidates: ") + cudaGetErrorString(e));
}

}  // namespace tf::cuda
