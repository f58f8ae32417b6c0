// Per-target body shared by the Highway kernel files (included first inside their HWY_NAMESPACE, after the `hn`
// alias): the lane layout and the one accumulation loop that fix every weight format's per-row arithmetic.
#if defined(TF_DOT_ACCUMULATE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TF_DOT_ACCUMULATE_INL_H_
#undef TF_DOT_ACCUMULATE_INL_H_
#else
#define TF_DOT_ACCUMULATE_INL_H_
#endif

// At most 8 float lanes, so AVX2 and AVX-512 machines share one lane layout (and so the same bits).
using D = hn::CappedTag<float, 8>;
using V = hn::Vec<D>;
using DF16 = hn::Rebind<hwy::float16_t, D>;

// Control ids planted in the shared accumulation loop of one format (0: none).
struct Ctl {
  int nonfinite_zero = 0, lost_block = 0, fp16_acc = 0, neighbour_row = 0, past_end = 0;
};

HWY_INLINE V LoadX(const float* p, const Ctl& ctl) {
  const D d;
  if (TF_CTL_ON(ctl.nonfinite_zero) && ctl.nonfinite_zero) {
    HWY_ALIGN float tmp[8];
    for (size_t i = 0; i < hn::Lanes(d); ++i) tmp[i] = std::isfinite(p[i]) ? p[i] : 0.0f;
    return hn::Load(d, tmp);
  }
  return hn::LoadU(d, p);
}

// Fixed accumulation: per row two accumulators alternating over chunks, blocks in order, one final reduction.
// `prep(b)` decodes a block's scalars once; `chunk(state, i)` decodes elements [i, i+N) of it in registers.
template <int NR, int kBlock, class Prep, class Chunk>
HWY_INLINE void Accumulate(int64_t n_in, const Prep& prep, const Chunk& chunk, const float* x, int64_t xs, float* out,
                           int64_t os, const Ctl& ctl) {
  const D d;
  constexpr int N = int(hn::MaxLanes(D()));
  static_assert(kBlock % N == 0, "a block is a whole number of chunks");
  V acc[NR][2];
  for (int r = 0; r < NR; ++r) acc[r][0] = acc[r][1] = hn::Zero(d);
  const int64_t nb = n_in / kBlock;
  for (int64_t b = 0; b < nb; ++b) {
    if (TF_CTL_ON(ctl.lost_block) && ctl.lost_block && b == nb - 1) break;
    const auto st = prep(b);
    const float* xb = x + b * kBlock;
    for (int c = 0; c < kBlock / N; ++c) {
      const V w = chunk(st, c * N);
      for (int r = 0; r < NR; ++r) {
        int rx = (TF_CTL_ON(ctl.neighbour_row) && ctl.neighbour_row && r > 0 && b == 0) ? r - 1 : r;
        acc[r][c & 1] = hn::MulAdd(w, LoadX(xb + rx * xs + c * N, ctl), acc[r][c & 1]);
      }
    }
    if (TF_CTL_ON(ctl.fp16_acc) && ctl.fp16_acc)
      for (int r = 0; r < NR; ++r)
        for (int k = 0; k < 2; ++k) acc[r][k] = hn::PromoteTo(d, hn::DemoteTo(DF16(), acc[r][k]));
  }
  for (int r = 0; r < NR; ++r) out[r * os] = hn::GetLane(hn::SumOfLanes(d, hn::Add(acc[r][0], acc[r][1])));
  if (TF_CTL_ON(ctl.past_end) && ctl.past_end) out[NR * os] = 0.0f;
}

#endif
