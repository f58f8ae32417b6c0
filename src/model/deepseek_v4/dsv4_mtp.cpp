// DeepSeek-V4's MTP layer as a drafter: teacher-forced in every forward so its kv is in the slots like all state.
#include <algorithm>

#include "base/error.h"
#include "model/deepseek_v4/dsv4_model.h"
#include "model/deepseek_v4/dsv4_ops.h"

namespace tf::dsv4 {

void Model::mtp_input(const int32_t* toks, const float* h, int64_t n, float* Xs) {
  const int64_t hc = c_.hc_mult, D = c_.hidden;
  std::vector<float> e(size_t(n * D)), en(size_t(n * D)), ep(size_t(n * D));
  cpu::embedding(embed_, toks, n, e.data());
  cpu::rmsnorm(e.data(), enorm_.data(), n, D, float(c_.rms_eps), en.data());
  mm(e_proj_, en.data(), n, ep.data());
  std::vector<float> hn(size_t(n * hc * D)), hp(size_t(n * hc * D));
  cpu::rmsnorm(h, hnorm_.data(), n * hc, D, float(c_.rms_eps), hn.data());  // each stream on its own
  mm(h_proj_, hn.data(), n * hc, hp.data());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < hc; ++i)
      for (int64_t j = 0; j < D; ++j)
        Xs[(r * hc + i) * D + j] = ep[size_t(r * D + j)] + hp[size_t((r * hc + i) * D + j)];
}

void Model::mtp_teacher_forced(const std::vector<BatchRow>& rows) {
  const int64_t n = int64_t(rows.size()), hc = c_.hc_mult, D = c_.hidden, d = c_.head_dim;
  for (int64_t r = 0; r < n; ++r)
    std::copy_n(X_.data() + r * hc * D, hc * D, slot(rows[size_t(r)], rows[size_t(r)].pos) + off_xm_);
  std::vector<int64_t> idx, pos;
  std::vector<int32_t> toks;
  for (int64_t r = 0; r < n; ++r) {
    const BatchRow& b = rows[size_t(r)];
    if (b.pos >= 1) idx.push_back(r), pos.push_back(b.pos), toks.push_back(b.token);
  }
  const int64_t m = int64_t(idx.size());
  if (m == 0) return;
  std::vector<float> h(size_t(m * hc * D)), Xs(size_t(m * hc * D)), col(size_t(m * D)), xn(size_t(m * D));
  for (int64_t k = 0; k < m; ++k)
    std::copy_n(slot(rows[size_t(idx[size_t(k)])], pos[size_t(k)] - 1) + off_xm_, hc * D, h.data() + k * hc * D);
  mtp_input(toks.data(), h.data(), m, Xs.data());
  std::vector<double> post(size_t(m * hc)), comb(size_t(m * hc * hc));
  hc_mix(mtp_->hc_attn, Xs.data(), m, post.data(), comb.data(), col.data());
  cpu::rmsnorm(col.data(), mtp_->attn_norm.data(), m, D, float(c_.rms_eps), xn.data());
  std::vector<float> kv;
  kv_only(*mtp_, xn.data(), m, pos.data(), kv);
  for (int64_t k = 0; k < m; ++k)
    std::copy_n(kv.data() + k * d, d, slot(rows[size_t(idx[size_t(k)])], pos[size_t(k)]) + off_mkv_);
}

std::vector<int32_t> Model::draft_mtp(const std::vector<int32_t>& pages, const std::vector<int32_t>& tokens,
                                      int64_t max_tokens, std::vector<float>* logits) {
  const int64_t n = int64_t(tokens.size()) - 1, hc = c_.hc_mult, D = c_.hidden, d = c_.head_dim, W = c_.window;
  std::vector<int32_t> drafts;
  if (!mtp_ || n < 1 || max_tokens < 1) return drafts;
  const BatchRow rb{&pages, 0, 0, false};
  TF_CHECK((n - 1) / page_size_ < int64_t(pages.size()), "position {} outside the sequence's pages", n - 1);
  std::vector<float> h(slot(rb, n - 1) + off_xm_, slot(rb, n - 1) + off_xm_ + hc * D);
  std::vector<float> Xs(static_cast<size_t>(hc * D)), col(static_cast<size_t>(D)), xn(static_cast<size_t>(D));
  std::vector<float> F(static_cast<size_t>(D)), o(static_cast<size_t>(c_.n_head * d));
  std::vector<float> lg(static_cast<size_t>(c_.vocab));
  std::vector<std::vector<float>> local;  // the drafted positions' MTP kv, n onwards
  double post[16], comb[256];
  for (int64_t i = 0; i < max_tokens; ++i) {
    const int64_t q = n + i;
    const int32_t tok = i == 0 ? tokens[size_t(n)] : drafts.back();
    mtp_input(&tok, h.data(), 1, Xs.data());
    hc_mix(mtp_->hc_attn, Xs.data(), 1, post, comb, col.data());
    cpu::rmsnorm(col.data(), mtp_->attn_norm.data(), 1, D, float(c_.rms_eps), xn.data());
    std::vector<float> qr, qv, kv;
    q_and_kv(*mtp_, xn.data(), 1, &q, qr, qv, kv);
    local.push_back(kv);
    std::vector<const float*> keys;
    for (int64_t s = std::max<int64_t>(1, q - W + 1); s <= q; ++s)
      keys.push_back(s < n ? slot(rb, s) + off_mkv_ : local[size_t(s - n)].data());
    attend_row(*mtp_, qv.data(), keys, q, o.data());
    out_proj(*mtp_, o.data(), 1, F.data());
    expand(F.data(), 1, post, comb, Xs.data());
    hc_mix(mtp_->hc_ffn, Xs.data(), 1, post, comb, col.data());
    cpu::rmsnorm(col.data(), mtp_->ffn_norm.data(), 1, D, float(c_.rms_eps), xn.data());
    moe(*mtp_, {rb}, xn.data(), F.data());
    expand(F.data(), 1, post, comb, Xs.data());
    head_logits(mtp_hc_head_, mtp_norm_, Xs.data(), 1, lg.data());
    drafts.push_back(int32_t(std::max_element(lg.begin(), lg.end()) - lg.begin()));  // ties to the lower id
    if (logits) logits->insert(logits->end(), lg.begin(), lg.end());
    h = Xs;
  }
  return drafts;
}

}  // namespace tf::dsv4
