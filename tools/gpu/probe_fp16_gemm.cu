// Probe, not a server kernel: how close to cuBLAS can a row-invariant Q4_K product of many rows get when x is one
// fp16 value (a per-row power of two keeps it in range) and each weight is dequantised to fp16 in registers, so
// every 16-column step is one wgmma and no scale step runs on the CUDA cores? It also checks that the warpgroup
// kernel gives the bits of a one-row-style mma.sync kernel (what decode would run) and the error against float64.
// Build and run on the GPU machine:
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/probe_f16 tools/gpu/probe_fp16_gemm.cu \
//     -lcublas && /tmp/probe_f16
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

#define CK(x)                                                                       \
  do {                                                                              \
    cudaError_t e_ = (x);                                                           \
    if (e_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

constexpr int kWarps = 8;               // two warpgroups: 128 outputs share each staged slice of x
constexpr int kRowPad = 256;            // rows padded to the largest row block
// A 64-column slice of x for n rows is n x 128 bytes in either layout: no swizzle, [step][8-column half][row][16
// bytes]; 128-byte swizzle, [row][16-byte chunk c ^ (row & 7)].
__host__ __device__ constexpr int unit_bytes(int n) { return n * 128; }
constexpr int smem_bytes(int n, int stages) { return stages * unit_bytes(n) + 8 * stages + 1024; }

struct Q4K {              // Q4_K in the probe's layout
  const uint4* q;         // [16-output tile][64-column unit][lane]: word st holds step st's eight nibbles
  const uint32_t* m;      // [tile][super-block][16 outputs][5]: d | dmin, four scale bytes x 2, four min bytes x 2
  int64_t n_in, n_out, units, sbs;
};

__device__ __forceinline__ uint32_t h2u(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
__device__ __forceinline__ __half2 u2h(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }
__device__ __forceinline__ float f16f(uint32_t bits) { return __half2float(__ushort_as_half(uint16_t(bits))); }

// Group j's fp16 scale d*sc and negated min -dmin*m of this thread's rows g and g + 8, each as a half2 pair.
__device__ __forceinline__ void group_scales(const uint32_t (&m)[2][5], int j, uint32_t (&s2)[2], uint32_t (&n2)[2]) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const float sc = float((m[hr][1 + (j >> 2)] >> (8 * (j & 3))) & 63u);
    const float mn = float((m[hr][3 + (j >> 2)] >> (8 * (j & 3))) & 63u);
    const __half s = __float2half_rn(f16f(m[hr][0]) * sc), n = __float2half_rn(-(f16f(m[hr][0] >> 16) * mn));
    s2[hr] = h2u(__halves2half2(s, s));
    n2[hr] = h2u(__halves2half2(n, n));
  }
}
// One step's A fragment: the nibble q as 1024 + q by a LOP3, q exactly by HSUB2, then fp16(q * s + n) by HFMA2.
__device__ __forceinline__ void step_frag(uint32_t w, const uint32_t (&s2)[2], const uint32_t (&n2)[2],
                                          uint32_t (&a)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t v;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(v) : "r"(w >> (4 * i)), "n"(0x000F000Fu), "n"(0x64006400u));
    const __half2 q = __hsub2(u2h(v), u2h(0x64006400u));
    a[i] = h2u(__hfma2(q, u2h(s2[i & 1]), u2h(n2[i & 1])));
  }
}
__device__ __forceinline__ uint32_t word(const uint4& u, int i) { return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w; }

__device__ __forceinline__ void wgmma128(float (&d)[64], const uint32_t (&a)[4], uint64_t desc, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,"
      "%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc)
      : "memory");
}

__device__ __forceinline__ void wgmma256(float (&d)[128], const uint32_t (&a)[4], uint64_t desc, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,"
      "%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,"
      "%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,"
      "%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,"
      "%119,%120,%121,%122,%123,%124,%125,%126,%127}, {%128,%129,%130,%131}, %132, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]),
        "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]),
        "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]),
        "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]),
        "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]),
        "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),
        "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]),
        "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),
        "+f"(d[126]), "+f"(d[127])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc)
      : "memory");
}

// A block of two warpgroups over 128 outputs x kN rows. Thread 0 brings each 64-column slice of x's image by one
// bulk copy into a ring of kStages; every thread loads its own nibbles kAhead slices ahead and decodes them.
// rows_fast: blockIdx.x is the row block, so the blocks that share a weight tile run together and share it in L2.
template <int kN, int kStages, int kAhead, bool kSwz>
__global__ void __launch_bounds__(kWarps * 32, 1) wg_kernel(Q4K W, const uint8_t* __restrict__ xw,
                                                             const int* __restrict__ xe, float* __restrict__ y,
                                                             int64_t n_rows, int ctl, int rows_fast) {
  const int64_t bx = rows_fast ? blockIdx.y : blockIdx.x, by = rows_fast ? blockIdx.x : blockIdx.y;
  constexpr int kUnitB = unit_bytes(kN), kStepB = kUnitB / 4;
  extern __shared__ __align__(1024) uint8_t sm_raw[];
  uint8_t* sm = sm_raw + ((1024 - (uint32_t(__cvta_generic_to_shared(sm_raw)) & 1023)) & 1023);  // swizzle atoms
  const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3, warp = tid >> 5;
  const int64_t last = (W.n_out + 15) / 16 - 1, tile = bx * kWarps + warp;
  const int64_t tm = tile < last ? tile : last;
  const uint32_t base = uint32_t(__cvta_generic_to_shared(sm)), bar0 = base + uint32_t(kStages * kUnitB);
  const uint8_t* xb = xw + by * W.units * kUnitB;
  auto fetch = [&](int64_t u) {
    const uint32_t st = uint32_t(u % kStages), bar = bar0 + 8 * st;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(kUnitB) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     base + st * kUnitB),
                 "l"(xb + u * kUnitB), "r"(kUnitB), "r"(bar)
                 : "memory");
  };
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar0 + 8 * s));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (int64_t u = 0; u < kStages && u < W.units; ++u) fetch(u);
  }
  __syncthreads();
  const uint4* qp = W.q + tm * W.units * 32 + lane;
  auto load_meta = [&](int64_t sb, uint32_t(&m)[2][5]) {
    const uint32_t* p = W.m + ((tm * W.sbs + sb) * 16 + g) * 5;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
#pragma unroll
      for (int k = 0; k < 5; ++k) m[hr][k] = __ldg(p + 40 * hr + k);
  };
  uint32_t meta[2][5], meta_n[2][5];
  load_meta(0, meta_n);
  uint4 r[kAhead];
#pragma unroll
  for (int i = 0; i < kAhead; ++i) r[i] = __ldg(qp + (i < W.units ? i : 0) * 32);
  // No swizzle: LBO the step's second 8 columns (kN rows of 16 bytes on), SBO the next 8 rows (128 bytes on).
  // 128-byte swizzle: SBO the next 8 rows (1,024 bytes on), a step 32 bytes along each row.
  const uint64_t lbo_sbo = kSwz ? (uint64_t(1) << 62) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32)
                                : (uint64_t((kN * 16) >> 4) << 16) | (uint64_t(128 >> 4) << 32);
  constexpr int kStepDesc = kSwz ? 32 : kStepB;
  float c[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) c[i] = 0.0f;
  uint32_t a[2][4][4];
  for (int64_t sb = 0; sb < W.sbs; ++sb) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
#pragma unroll
      for (int k = 0; k < 5; ++k) meta[hr][k] = meta_n[hr][k];
    if (sb + 1 < W.sbs) load_meta(sb + 1, meta_n);
#pragma unroll
    for (int uu = 0; uu < 4; ++uu) {
      const int64_t u = sb * 4 + uu;
      const uint4 cur = r[0];
#pragma unroll
      for (int i = 0; i + 1 < kAhead; ++i) r[i] = r[i + 1];
      if (u + kAhead < W.units) r[kAhead - 1] = __ldg(qp + (u + kAhead) * 32);
      uint32_t s2[2][2], n2[2][2];
      group_scales(meta, 2 * uu, s2[0], n2[0]);
      group_scales(meta, 2 * uu + 1, s2[1], n2[1]);
#pragma unroll
      for (int st = 0; st < 4; ++st) step_frag(word(cur, st), s2[st >> 1], n2[st >> 1], a[uu & 1][st]);
      const uint32_t stage = uint32_t(u % kStages), bar = bar0 + 8 * stage;
      asm volatile(
          "{\n.reg .pred done;\nwait_%=:\n"
          "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
          "@!done bra wait_%=;\n}\n" ::"r"(bar),
          "r"(uint32_t((u / kStages) & 1))
          : "memory");
      const uint32_t lo = ((base + stage * kUnitB) >> 4) | uint32_t(lbo_sbo);
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
      for (int st = 0; st < 4; ++st) {
        const int sx = (ctl == 1 && u == 0 && (st == 1 || st == 2)) ? 3 - st : st;  // planted: two steps swapped
        const uint64_t desc = (lbo_sbo >> 32 << 32) | (lo + uint32_t(sx * kStepDesc >> 4));
        if constexpr (kN == 128)
          wgmma128(c, a[uu & 1][st], desc, (u > 0 || st > 0) ? 1 : 0);
        else
          wgmma256(c, a[uu & 1][st], desc, (u > 0 || st > 0) ? 1 : 0);
      }
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
      __syncthreads();  // every warp's wgmma of slice u - 1 is done: its stage can be refilled
      if (tid == 0 && u >= 1 && u - 1 + kStages < W.units) {
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        fetch(u - 1 + kStages);
      }
    }
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) asm volatile("" : "+f"(c[i])::"memory");
  const int64_t row0 = by * kN;
#pragma unroll
  for (int jn = 0; jn < kN / 8; ++jn)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t o = tile * 16 + g + 8 * (e >> 1), row = row0 + 8 * jn + 2 * t + (e & 1);
      if (o < W.n_out && row < n_rows) y[row * W.n_out + o] = ldexpf(c[4 * jn + e], -xe[row]);
    }
}

// What decode would run: a warp per 16 outputs x 8 rows, one mma.sync m16n8k16 a step over the same fragments.
__global__ void ref_kernel(Q4K W, const __half* __restrict__ x16, const int* __restrict__ xe, float* __restrict__ y,
                           int64_t n_rows) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  const int64_t tile = blockIdx.x, row0 = int64_t(blockIdx.y) * 8;
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  uint32_t meta[2][5];
  for (int64_t u = 0; u < W.units; ++u) {
    if (u % 4 == 0) {
      const uint32_t* p = W.m + ((tile * W.sbs + u / 4) * 16 + g) * 5;
      for (int hr = 0; hr < 2; ++hr)
        for (int k = 0; k < 5; ++k) meta[hr][k] = p[40 * hr + k];
    }
    const uint4 raw = W.q[(tile * W.units + u) * 32 + lane];
    for (int st = 0; st < 4; ++st) {
      uint32_t s2[2], n2[2], a[4];
      group_scales(meta, int(2 * (u % 4) + st / 2), s2, n2);
      step_frag(word(raw, st), s2, n2, a);
      const __half* xr = x16 + (row0 + g) * W.n_in + u * 64 + st * 16 + 2 * t;
      const uint32_t b0 = *reinterpret_cast<const uint32_t*>(xr), b1 = *reinterpret_cast<const uint32_t*>(xr + 8);
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
  }
  for (int e = 0; e < 4; ++e) {
    const int64_t o = tile * 16 + g + 8 * (e >> 1), row = row0 + 2 * t + (e & 1);
    if (o < W.n_out && row < n_rows) y[row * W.n_out + o] = ldexpf(c[e], -xe[row]);
  }
}

// x to one fp16 a value: row r scaled by 2^e_r (max |x| into [2^14, 2^15)), written as the blocks' image of
// [row block][step][8-column half][row][8 values] and as plain rows for ref_kernel. Rows past n_rows are zeros.
__global__ void stage_kernel(const float* __restrict__ x, int64_t n_in, int64_t n_rows, uint8_t* __restrict__ xw,
                             __half* __restrict__ x16, int* __restrict__ xe, int kN, int swz) {
  const int64_t r = blockIdx.x;
  __shared__ float red[32];
  const float4* xr = reinterpret_cast<const float4*>(x + r * n_in);
  float mx = 0.0f;
  if (r < n_rows)
    for (int64_t k = threadIdx.x; k < n_in / 4; k += blockDim.x) {
      const float4 v = __ldg(xr + k);
      mx = fmaxf(mx, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
    }
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, off));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
  __syncthreads();
  mx = 0.0f;
  for (int i = 0; i < int(blockDim.x >> 5); ++i) mx = fmaxf(mx, red[i]);
  int ex = 0;
  if (mx > 0.0f) frexpf(mx, &ex);
  const int e = mx > 0.0f ? 15 - ex : 0;
  if (threadIdx.x == 0) xe[r] = e;
  const int64_t rb = r / kN, n = r % kN;
  for (int64_t c8 = threadIdx.x; c8 < n_in / 8; c8 += blockDim.x) {  // eight columns a thread: one 16-byte store
    uint32_t h[4] = {0, 0, 0, 0};
    if (r < n_rows) {
      const float4 a = __ldg(xr + 2 * c8), b = __ldg(xr + 2 * c8 + 1);
      h[0] = h2u(__floats2half2_rn(ldexpf(a.x, e), ldexpf(a.y, e)));
      h[1] = h2u(__floats2half2_rn(ldexpf(a.z, e), ldexpf(a.w, e)));
      h[2] = h2u(__floats2half2_rn(ldexpf(b.x, e), ldexpf(b.y, e)));
      h[3] = h2u(__floats2half2_rn(ldexpf(b.z, e), ldexpf(b.w, e)));
    }
    const uint4 v = make_uint4(h[0], h[1], h[2], h[3]);
    reinterpret_cast<uint4*>(x16 + r * n_in)[c8] = v;
    const int64_t at = swz ? (rb * (n_in / 64) + c8 / 8) * kN * 128 + n * 128 + (((c8 & 7) ^ (n & 7)) * 16)
                           : ((rb * (n_in / 16) + c8 / 2) * 2 + (c8 & 1)) * kN * 16 + n * 16;
    *reinterpret_cast<uint4*>(xw + at) = v;
  }
}

uint64_t rng_state = 0x1234567;
uint32_t rnd() {
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return uint32_t(rng_state >> 11);
}
uint16_t f2h(float f) {
  const __half h = __float2half_rn(f);
  return *reinterpret_cast<const uint16_t*>(&h);
}
float h2f_host(uint16_t b) {
  __half h;
  std::memcpy(&h, &b, 2);
  return __half2float(h);
}

struct Case {
  int64_t n_in, n_out, rows;
};

template <class F>
float time_us(F&& f, int reps = 20) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  CK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) f();
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0.0f;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return 1000.0f * ms / float(reps);
}

}  // namespace

int main() {
  cublasHandle_t h;
  cublasCreate(&h);
  const float one = 1.0f, zero = 0.0f;
  double peak = 0.0;
  {
    const int n = 8192;
    void *A, *B, *C;
    CK(cudaMalloc(&A, size_t(n) * n * 2));
    CK(cudaMalloc(&B, size_t(n) * n * 2));
    CK(cudaMalloc(&C, size_t(n) * n * 4));
    CK(cudaMemset(A, 0x3C, size_t(n) * n * 2));
    CK(cudaMemset(B, 0x3C, size_t(n) * n * 2));
    const float us = time_us([&] {
      cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, CUDA_R_16BF, n, B, CUDA_R_16BF, n, &zero, C,
                   CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }, 10);
    peak = 2.0 * n * n * double(n) / (us * 1e-6) / 1e12;
    std::printf("cuBLAS bf16 GEMM 8192^3 (f32 out): %.0f TFLOP/s = the peak below\n", peak);
    CK(cudaFree(A));
    CK(cudaFree(B));
    CK(cudaFree(C));
  }
  using KernelFn = void (*)(Q4K, const uint8_t*, const int*, float*, int64_t, int, int);
  struct Variant {
    const char* name;
    KernelFn k;
    int n, stages, swz, rows_fast;
  };
  const Variant variants[] = {{"N 128, no swizzle, 4 stages", wg_kernel<128, 4, 2, false>, 128, 4, 0, 1},
                              {"N 128, 128-byte swizzle, 4 stages", wg_kernel<128, 4, 2, true>, 128, 4, 1, 1},
                              {"N 256, 128-byte swizzle, 3 stages", wg_kernel<256, 3, 2, true>, 256, 3, 1, 1},
                              {"N 256, no swizzle, 3 stages", wg_kernel<256, 3, 2, false>, 256, 3, 0, 1}};
  for (const Variant& v : variants)
    CK(cudaFuncSetAttribute(v.k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes(v.n, v.stages)));
  const Case cases[] = {{4096, 28672, 512}, {14336, 4096, 512}, {4096, 4096, 512}, {4096, 1024, 512},
                        {4096, 28672, 4096}, {4096, 28672, 100}, {4096, 4096, 1}};
  int fails = 0;
  for (const Case& cs : cases) {
    const int64_t K = cs.n_in, M = cs.n_out, R = cs.rows, tiles = (M + 15) / 16, units = K / 64, sbs = K / 256;
    const int64_t rpad = (R + kRowPad - 1) / kRowPad * kRowPad;
    std::vector<uint32_t> hq(size_t(tiles * units * 32 * 4)), hm(size_t(tiles * sbs * 16 * 5));
    std::vector<uint8_t> nib(size_t(M * K));
    std::vector<float> hx(size_t(R * K));
    for (int64_t o = 0; o < M; ++o)
      for (int64_t sb = 0; sb < sbs; ++sb) {
        uint32_t* m = &hm[size_t(((o / 16 * sbs + sb) * 16 + o % 16) * 5)];
        m[0] = f2h(std::ldexp(1.0f + float(rnd() % 1024) / 1024.0f, -8 - int(rnd() % 3))) |
               (uint32_t(f2h(std::ldexp(1.0f + float(rnd() % 1024) / 1024.0f, -9 - int(rnd() % 3)))) << 16);
        for (int j = 0; j < 8; ++j) {
          m[1 + j / 4] |= (rnd() % 64) << (8 * (j % 4));
          m[3 + j / 4] |= (rnd() % 64) << (8 * (j % 4));
        }
      }
    for (auto& v : nib) v = uint8_t(rnd() % 16);
    // Fragment layout: lane (g, t), step st, pair i: output g + 8 (i & 1), columns 2t + 8 (i >> 1) and the next.
    for (int64_t tl = 0; tl < tiles; ++tl)
      for (int64_t u = 0; u < units; ++u)
        for (int lane = 0; lane < 32; ++lane)
          for (int st = 0; st < 4; ++st) {
            uint32_t w = 0;
            for (int i = 0; i < 4; ++i) {
              const int64_t o = tl * 16 + (lane >> 2) + 8 * (i & 1), k = u * 64 + st * 16 + 2 * (lane & 3) + 8 * (i >> 1);
              if (o < M) w |= uint32_t(nib[size_t(o * K + k)]) << (4 * i) | uint32_t(nib[size_t(o * K + k + 1)]) << (4 * i + 16);
            }
            hq[size_t(((tl * units + u) * 32 + lane) * 4 + st)] = w;
          }
    for (int64_t r = 0; r < R; ++r) {
      const float sc = std::ldexp(1.0f, int(r % 7) * 3 - 9);
      for (int64_t k = 0; k < K; ++k) hx[size_t(r * K + k)] = sc * (float(int(rnd() % 20001) - 10000) / 3000.0f);
      if (r % 5 == 1) hx[size_t(r * K + (r * 37) % K)] = 2.0e4f * sc;  // an outlier fp16 alone could not hold
    }
    uint4* dq;
    uint32_t* dm;
    float *dx, *dy, *dr, *dyb;
    uint8_t* dxw;
    __half *dx16, *dxh, *dwh;
    int* de;
    CK(cudaMalloc(&dq, hq.size() * 4));
    CK(cudaMalloc(&dm, hm.size() * 4));
    CK(cudaMalloc(&dx, hx.size() * 4));
    CK(cudaMalloc(&dy, size_t(R * M) * 4));
    CK(cudaMalloc(&dr, size_t(R * M) * 4));
    CK(cudaMalloc(&dyb, size_t(R * M) * 4));
    CK(cudaMalloc(&dxw, size_t(rpad * K) * 2));
    CK(cudaMalloc(&dx16, size_t(rpad * K) * 2));
    CK(cudaMalloc(&dxh, size_t(R * K) * 2));
    CK(cudaMalloc(&dwh, size_t(M * K) * 2));
    CK(cudaMalloc(&de, size_t(rpad) * 4));
    CK(cudaMemcpy(dq, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dm, hm.data(), hm.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dxh, 0x3C, size_t(R * K) * 2));  // nonzero operands for cuBLAS's timing
    CK(cudaMemset(dwh, 0x3C, size_t(M * K) * 2));
    const Q4K W{dq, dm, K, M, units, sbs};
    const unsigned cbs = unsigned((tiles + kWarps - 1) / kWarps);
    auto stage = [&](int n, int swz) { stage_kernel<<<unsigned(rpad), 256>>>(dx, K, R, dxw, dx16, de, n, swz); };
    auto run = [&](const Variant& v, int ctl) {
      const unsigned rbs = unsigned((R + v.n - 1) / v.n);
      const dim3 grid = v.rows_fast ? dim3(rbs, cbs) : dim3(cbs, rbs);
      v.k<<<grid, kWarps * 32, smem_bytes(v.n, v.stages)>>>(W, dxw, de, dy, R, ctl, v.rows_fast);
    };
    stage(variants[0].n, variants[0].swz);
    CK(cudaGetLastError());
    ref_kernel<<<dim3(unsigned(tiles), unsigned(rpad / 8)), 32>>>(W, dx16, de, dr, R);
    CK(cudaGetLastError());
    run(variants[0], 1);
    CK(cudaDeviceSynchronize());
    std::vector<float> y(size_t(R * M)), yr(size_t(R * M));
    CK(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(yr.data(), dr, yr.size() * 4, cudaMemcpyDeviceToHost));
    int64_t planted = 0;
    for (size_t i = 0; i < y.size(); ++i) planted += std::memcmp(&y[i], &yr[i], 4) != 0;
    const double flop = 2.0 * double(R) * double(K) * double(M);
    const float us_stage = time_us([&] { stage(128, 0); });
    const float us_f16 = time_us([&] {
      cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(M), int(R), int(K), &one, dwh, CUDA_R_16F, int(K), dxh,
                   CUDA_R_16F, int(K), &zero, dyb, CUDA_R_32F, int(M), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    });
    const float us_bf16 = time_us([&] {
      cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(M), int(R), int(K), &one, dwh, CUDA_R_16BF, int(K), dxh,
                   CUDA_R_16BF, int(K), &zero, dyb, CUDA_R_32F, int(M), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    });
    std::printf("%5lld x %5lld, %4lld rows: cuBLAS fp16 %.1f us (%.1f TFLOP/s), bf16 %.1f us; x stage %.1f us; "
                "planted fault changed %lld of %lld outputs\n",
                (long long)K, (long long)M, (long long)R, us_f16, flop / us_f16 * 1e-6, us_bf16, us_stage,
                (long long)planted, (long long)y.size());
    fails += planted == 0;
    for (const Variant& v : variants) {
    stage(v.n, v.swz);
    run(v, 0);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost));
    int64_t differ = 0;
    for (size_t i = 0; i < y.size(); ++i) differ += std::memcmp(&y[i], &yr[i], 4) != 0;
    // Float64 against the GGUF dequantisation d*sc*q - dmin*m; bound in units of sum (|d sc q| + |dmin m|) |x|.
    double worst = 0.0;
    for (int sample = 0; sample < 400; ++sample) {
      const int64_t r = rnd() % R, o = rnd() % M;
      double ref = 0.0, cond = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const uint32_t* m = &hm[size_t(((o / 16 * sbs + k / 256) * 16 + o % 16) * 5)];
        const int j = int(k % 256 / 32);
        const double d = h2f_host(uint16_t(m[0])), dmin = h2f_host(uint16_t(m[0] >> 16));
        const double sc = (m[1 + j / 4] >> (8 * (j % 4))) & 63, mn = (m[3 + j / 4] >> (8 * (j % 4))) & 63;
        const double q = nib[size_t(o * K + k)], x = hx[size_t(r * K + k)];
        ref += (d * sc * q - dmin * mn) * x;
        cond += (std::fabs(d * sc * q) + std::fabs(dmin * mn)) * std::fabs(x);
      }
      if (cond > 0) worst = std::max(worst, std::fabs(double(y[size_t(r * M + o)]) - ref) / cond);
    }
    const double bound = 4.0 * std::ldexp(1.0, -11);
    const bool ok = differ == 0 && worst <= bound;
    fails += !ok;
    const float us_wg = time_us([&] { run(v, 0); });
    CK(cudaGetLastError());
    std::printf("  %-34s %8.1f us, %5.1f TFLOP/s = %4.1f%% of peak, %.2f of cuBLAS bf16 | differ from mma.sync %lld | "
                "err/cond %.2e (bound %.2e) %s\n",
                v.name, us_wg, flop / us_wg * 1e-6, 100.0 * flop / us_wg * 1e-6 / peak, us_bf16 / us_wg,
                (long long)differ, worst, bound, ok ? "ok" : "FAIL");
    }
    for (void* p : {(void*)dq, (void*)dm, (void*)dx, (void*)dy, (void*)dr, (void*)dyb, (void*)dxw, (void*)dx16,
                    (void*)dxh, (void*)dwh, (void*)de})
      CK(cudaFree(p));
  }
  cublasDestroy(h);
  std::printf("SUMMARY probe_fp16_gemm: %s\n", fails ? "FAIL" : "all cases ok");
  return fails ? 1 : 0;
}
