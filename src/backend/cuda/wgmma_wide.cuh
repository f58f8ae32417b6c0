#pragma once
// Warpgroup mma from shared memory at N = 192, 224, 256: f16_wide_gemm.cuh's x (A, 64 rows) against its image (B).
#include <cstdint>

namespace tf::cuda {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Eight accumulators from d[b] on as asm in-out operands.
#define TF_WIDE_OUT8(d, b)                                                                                    \
  "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3]), "+f"(d[b + 4]), "+f"(d[b + 5]), "+f"(d[b + 6]), \
      "+f"(d[b + 7])
template <int kN>
__device__ __forceinline__ void wgmma_f16_ss_wide(float (&d)[kN / 2], uint64_t da, uint64_t db, int acc);
template <>
__device__ __forceinline__ void wgmma_f16_ss_wide<192>(float (&d)[96], uint64_t da, uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,"
      "%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,"
      "%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,"
      "%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95"
      "}, %96, %97, p, 1, 1, 0, 0;\n}\n"
      : TF_WIDE_OUT8(d, 0), TF_WIDE_OUT8(d, 8), TF_WIDE_OUT8(d, 16), TF_WIDE_OUT8(d, 24), TF_WIDE_OUT8(d, 32),
        TF_WIDE_OUT8(d, 40), TF_WIDE_OUT8(d, 48), TF_WIDE_OUT8(d, 56), TF_WIDE_OUT8(d, 64), TF_WIDE_OUT8(d, 72),
        TF_WIDE_OUT8(d, 80), TF_WIDE_OUT8(d, 88)
      : "l"(da), "l"(db), "r"(acc)
      : "memory");
}
template <>
__device__ __forceinline__ void wgmma_f16_ss_wide<224>(float (&d)[112], uint64_t da, uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %114, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n224k16.f32.f16.f16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,"
      "%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,"
      "%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,"
      "%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,"
      "%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111"
      "}, %112, %113, p, 1, 1, 0, 0;\n}\n"
      : TF_WIDE_OUT8(d, 0), TF_WIDE_OUT8(d, 8), TF_WIDE_OUT8(d, 16), TF_WIDE_OUT8(d, 24), TF_WIDE_OUT8(d, 32),
        TF_WIDE_OUT8(d, 40), TF_WIDE_OUT8(d, 48), TF_WIDE_OUT8(d, 56), TF_WIDE_OUT8(d, 64), TF_WIDE_OUT8(d, 72),
        TF_WIDE_OUT8(d, 80), TF_WIDE_OUT8(d, 88), TF_WIDE_OUT8(d, 96), TF_WIDE_OUT8(d, 104)
      : "l"(da), "l"(db), "r"(acc)
      : "memory");
}
template <>
__device__ __forceinline__ void wgmma_f16_ss_wide<256>(float (&d)[128], uint64_t da, uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,"
      "%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,"
      "%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,"
      "%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,"
      "%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,"
      "%121,%122,%123,%124,%125,%126,%127"
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : TF_WIDE_OUT8(d, 0), TF_WIDE_OUT8(d, 8), TF_WIDE_OUT8(d, 16), TF_WIDE_OUT8(d, 24), TF_WIDE_OUT8(d, 32),
        TF_WIDE_OUT8(d, 40), TF_WIDE_OUT8(d, 48), TF_WIDE_OUT8(d, 56), TF_WIDE_OUT8(d, 64), TF_WIDE_OUT8(d, 72),
        TF_WIDE_OUT8(d, 80), TF_WIDE_OUT8(d, 88), TF_WIDE_OUT8(d, 96), TF_WIDE_OUT8(d, 104), TF_WIDE_OUT8(d, 112),
        TF_WIDE_OUT8(d, 120)
      : "l"(da), "l"(db), "r"(acc)
      : "memory");
}
#undef TF_WIDE_OUT8
#endif

}  // namespace tf::cuda
