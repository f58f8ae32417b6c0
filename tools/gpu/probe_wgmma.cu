// Probe, not a server kernel: does Hopper's warpgroup mma (wgmma m64nNk16, A in registers, B from shared memory)
// give the same f32 bits as the mma.sync m16n8k16 every product kernel uses, for the same A, B and accumulator?
// Build and run on the GPU machine:
//   nvcc -O2 -gencode arch=compute_90a,code=sm_90a -o /tmp/probe tools/gpu/probe_wgmma.cu && /tmp/probe
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "../../src/backend/cuda/wgmma_ops.cuh"

namespace {

__device__ uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A bf16 value of the trial's distribution: 0 small integers (exact, checks the layouts), 1 wide exponents,
// 2 weights as the products hold them (integers -32..63) against x's bf16 hi or lo part, 3 near-cancelling
// magnitudes with subnormals and zeros mixed in.
__device__ uint16_t draw(uint64_t h, int mode, bool is_a) {
  const uint32_t r = uint32_t(h), s = uint32_t(h >> 32);
  float v;
  switch (mode) {
    case 0:
      v = float(int(r % 17) - 8);
      break;
    case 1:
      v = ldexpf(1.0f + float(r & 0x7F) / 128.0f, int(s % 41) - 20) * ((s >> 8) & 1 ? -1.0f : 1.0f);
      break;
    case 2:
      if (is_a) {
        v = float(int(r % 96) - 32);
      } else {
        const float x = ldexpf(float(r) / 4294967296.0f, int(s % 9) - 4) * ((s >> 8) & 1 ? -1.0f : 1.0f);
        const float hi = __bfloat162float(__float2bfloat16_rn(x));
        v = (s >> 9) & 1 ? hi : x - hi;
      }
      break;
    default: {
      const int kind = int(s % 8);
      v = kind == 0   ? 0.0f
          : kind == 1 ? ldexpf(float(r & 0x7F), -133)  // bf16 subnormals
                      : ldexpf(1.0f + float(r & 0x3) / 128.0f, int(s % 3)) * ((s >> 8) & 1 ? -1.0f : 1.0f);
    }
  }
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

__device__ float draw_c(uint64_t h, int mode) {
  const uint32_t r = uint32_t(h), s = uint32_t(h >> 32);
  if (mode == 0) return 0.0f;
  if (mode == 3) return ldexpf(float(r % 64) - 32.0f, int(s % 4));
  return ldexpf(float(r) / 4294967296.0f - 0.5f, int(s % 31) - 10);
}

__device__ uint32_t pack(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }

template <int N>
__device__ void wgmma_n(float (&w)[N / 2], const uint32_t (&a)[4], uint64_t desc, int acc);
template <>
__device__ void wgmma_n<8>(float (&w)[4], const uint32_t (&a)[4], uint64_t desc, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
      : "+f"(w[0]), "+f"(w[1]), "+f"(w[2]), "+f"(w[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc)
      : "memory");
}
template <>
__device__ void wgmma_n<32>(float (&w)[16], const uint32_t (&a)[4], uint64_t desc, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
      "{%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
      : "+f"(w[0]), "+f"(w[1]), "+f"(w[2]), "+f"(w[3]), "+f"(w[4]), "+f"(w[5]), "+f"(w[6]), "+f"(w[7]), "+f"(w[8]),
        "+f"(w[9]), "+f"(w[10]), "+f"(w[11]), "+f"(w[12]), "+f"(w[13]), "+f"(w[14]), "+f"(w[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc)
      : "memory");
}

// m64n64 is the kernel's own wrapper (compile-time scale-d), so the probe checks the instruction it issues.
template <>
__device__ void wgmma_n<64>(float (&w)[32], const uint32_t (&a)[4], uint64_t desc, int acc) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  acc ? tf::cuda::wgmma_m64n64<1>(w, a, desc) : tf::cuda::wgmma_m64n64<0>(w, a, desc);
#endif
}

// One warpgroup; per trial each warp's 16 rows of A, the shared 16 x N B and every accumulator are drawn afresh.
// ctl 1 (a planted control): the wgmma copy of B has k = 0 and 1 swapped, so the comparison must report outputs.
// zero: wgmma with scale-d 0 (its accumulators hold the drawn values, to be ignored) against mma.sync with C = +0.
template <int N>
__global__ void __launch_bounds__(128)
    probe(uint64_t seed, int mode, int trials, int ctl, int zero, unsigned long long* counts) {
  __shared__ alignas(128) uint16_t sb[2][N][8];  // no-swizzle K-major core matrices: [k / 8][n][k % 8]
  __shared__ uint16_t bk[16][N];                 // the same B as [k][n] for the mma.sync fragments
  const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
  unsigned long long diff = 0, ulp_far = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const uint64_t base = mix(seed ^ (uint64_t(blockIdx.x) << 40) ^ (uint64_t(trial) << 8) ^ uint64_t(mode));
    for (int i = tid; i < 16 * N; i += 128) {
      const int k = i / N, n = i % N, ks = ctl == 1 && k < 2 ? 1 - k : k;
      const uint16_t v = draw(mix(base ^ (0x10000u + i)), mode, false);
      sb[ks / 8][n][ks % 8] = v, bk[k][n] = v;
    }
    uint32_t a[4];
    for (int i = 0; i < 4; ++i)
      a[i] = pack(draw(mix(base ^ (0x20000u + tid * 8 + 2 * i)), mode, true),
                  draw(mix(base ^ (0x20000u + tid * 8 + 2 * i + 1)), mode, true));
    float c[N / 2];
    for (int i = 0; i < N / 2; ++i) c[i] = draw_c(mix(base ^ (0x30000u + tid * 64 + i)), mode);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    float m[N / 2];
    for (int j = 0; j < N / 8; ++j) {  // one mma.sync per 8 columns, from the same accumulators
      const uint32_t b0 = pack(bk[2 * t][8 * j + g], bk[2 * t + 1][8 * j + g]);
      const uint32_t b1 = pack(bk[2 * t + 8][8 * j + g], bk[2 * t + 9][8 * j + g]);
      float* mj = m + 4 * j;
      for (int e = 0; e < 4; ++e) mj[e] = zero ? 0.0f : c[4 * j + e];
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(mj[0]), "+f"(mj[1]), "+f"(mj[2]), "+f"(mj[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    const uint32_t addr = uint32_t(__cvta_generic_to_shared(&sb[0][0][0]));
    // LBO: the next 8 k (N rows of 16 bytes on); SBO: the next 8 n (128 bytes on).
    const uint64_t desc =
        uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((N * 16) >> 4) << 16) | (uint64_t(128 >> 4) << 32);
    float w[N / 2];
    for (int i = 0; i < N / 2; ++i) w[i] = c[i];
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    wgmma_n<N>(w, a, desc, zero ? 0 : 1);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int i = 0; i < N / 2; ++i) {
      const uint32_t x = __float_as_uint(m[i]), y = __float_as_uint(w[i]);
      if (x != y) {
        diff += 1;
        const uint32_t d = x > y ? x - y : y - x;
        if (d > 1 || (x ^ y) >> 31) ulp_far += 1;
      }
    }
    __syncthreads();
  }
  atomicAdd(counts + 0, diff);
  atomicAdd(counts + 1, ulp_far);
  atomicAdd(counts + 2, (unsigned long long)trials * (N / 2));
}

}  // namespace

template <int N>
bool run(unsigned long long* d, int mode, int ctl, const char* name, int zero = 0) {
  cudaMemset(d, 0, 3 * sizeof(unsigned long long));
  probe<N><<<528, 128>>>(0x5EEDull + uint64_t(mode), mode, 4000, ctl, zero, d);
  unsigned long long h[3] = {0, 0, 0};
  const cudaError_t e = cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    std::printf("CUDA error: %s\n", cudaGetErrorString(e));
    std::exit(2);
  }
  std::printf("m64n%-2d mode %d %-44s%s%s outputs %llu  differing bits %llu  beyond 1 ulp %llu\n", N, mode, name,
              zero ? " [C = 0]" : "", ctl ? " [control]" : "", h[2], h[0], h[1]);
  return h[0] != 0;
}

int main() {
  unsigned long long* d = nullptr;
  cudaMalloc(&d, 3 * sizeof(unsigned long long));
  const char* names[4] = {"small integers (exact: checks the layouts)", "wide exponents",
                          "weights x bf16 hi/lo parts of x", "near-cancelling, subnormals, zeros"};
  bool bad = false;
  for (int mode = 0; mode < 4; ++mode) bad |= run<8>(d, mode, 0, names[mode]);
  for (int mode = 0; mode < 4; ++mode) bad |= run<32>(d, mode, 0, names[mode]);
  for (int mode = 0; mode < 4; ++mode) bad |= run<64>(d, mode, 0, names[mode]);  // the shape mma_wgmma_kernel runs
  for (int mode = 0; mode < 4; ++mode) bad |= run<64>(d, mode, 0, names[mode], 1);  // its first mma of a group
  const bool caught = run<8>(d, 0, 1, names[0]) && run<32>(d, 2, 1, names[2]);
  std::printf("%s; control %s\n",
              bad ? "PROBE wgmma differs from mma.sync" : "PROBE wgmma equals mma.sync on every output",
              caught ? "caught" : "NOT CAUGHT");
  return bad || !caught;
}
