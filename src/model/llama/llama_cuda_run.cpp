#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "backend/cpu/ops.h"
#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_gemv.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_sample.h"
#include "base/error.h"
#include "model/llama/llama_cuda.h"

namespace tf {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
constexpr int64_t kMaxGraphRows = 256;
constexpr int64_t kMaxKeys = kCudaMaxContext;

// Where each input lives in the staging buffers; fixed by (rows, page-table width) so a graph can keep them.
struct Layout {
  int64_t n, width, half;
  size_t ints_bytes() const { return align_up(size_t(6 * n + n * width) * 4); }
  size_t floats_bytes() const { return align_up(size_t(2 * n * half) * 4); }
  size_t total(bool sample) const {
    return ints_bytes() + floats_bytes() + (sample ? size_t(n) * sizeof(cuda::SampleRow) : 0);
  }
  int32_t* ids(void* b) const { return static_cast<int32_t*>(b); }
  int32_t* pos(void* b) const { return ids(b) + n; }
  int32_t* row_seq(void* b) const { return ids(b) + 2 * n; }
  int32_t* logit_idx(void* b) const { return ids(b) + 3 * n; }
  int32_t* table(void* b) const { return ids(b) + 4 * n; }
  int32_t* key_slot(void* b) const { return table(b) + n * width; }  // per sequence: its converted keys' first slot
  int32_t* key_count(void* b) const { return key_slot(b) + n; }      // and how many keys its rows attend
  float* cos(void* b) const { return reinterpret_cast<float*>(static_cast<char*>(b) + ints_bytes()); }
  float* sin(void* b) const { return cos(b) + n * half; }
  cuda::SampleRow* samples(void* b) const {
    return reinterpret_cast<cuda::SampleRow*>(static_cast<char*>(b) + ints_bytes() + floats_bytes());
  }
};

}  // namespace

// Angles in double trigonometry are dear a row and the same each round: made once a position, in whole blocks.
const float* LlamaCudaModel::rope_block(int64_t block) {
  constexpr int64_t kPositions = 1024;
  const int64_t half = cfg_.n_rot / 2;
  if (block >= int64_t(rope_blocks_.size())) rope_blocks_.resize(size_t(block + 1));
  if (rope_blocks_[size_t(block)].empty()) {
    std::vector<float> b(size_t(kPositions * 2 * half));
    for (int64_t p = 0; p < kPositions; ++p)
      cpu::rope_angles(block * kPositions + p, cfg_.n_rot, cfg_.rope_freq_base, cfg_.rope_freq_scale,
                       rope_freqs_.empty() ? nullptr : rope_freqs_.data(), b.data() + p * 2 * half,
                       b.data() + p * 2 * half + half);
    rope_blocks_[size_t(block)] = std::move(b);
  }
  return rope_blocks_[size_t(block)].data();
}

int64_t LlamaCudaModel::stage_inputs(const std::vector<BatchRow>& rows, const std::vector<RowSampling>* sampling,
                                     int64_t& n_logits, int64_t off) {
  const auto& c = cfg_;
  const int64_t n = int64_t(rows.size()), half = c.n_rot / 2;
  int64_t max_pages = 1, want = 0;
  if (!kv_) fail("no KV pool is bound on the device");
  if (n > kCudaMaxRows) fail("a forward of {} rows: the CUDA kernels take at most {}", n, kCudaMaxRows);
  for (const auto& r : rows) {
    want += r.want_logits ? 1 : 0;
    TF_CHECK(r.pages && r.pos >= 0 && r.pos / page_size_ < int64_t(r.pages->size()),
             "row position {} outside its sequence's pages", r.pos);
    TF_CHECK(r.token >= 0 && r.token < c.n_vocab, "row token {} outside the vocabulary", r.token);
    max_pages = std::max<int64_t>(max_pages, int64_t(r.pages->size()));
  }
  TF_CHECK(max_pages * page_size_ <= kMaxKeys, "a sequence of {} positions exceeds the CUDA attention limit of {} keys",
           max_pages * page_size_, kMaxKeys);
  const int64_t width = cuda_table_width(max_pages, page_size_);
  ensure_capacity(n, off + want, n * width);
  Layout L{n, width, half};
  void* h = staging_host_;
  std::memset(L.table(h), 0, size_t(n * width) * 4);
  int32_t seq = -1;
  const std::vector<int32_t>* prev = nullptr;
  n_logits = 0;
  for (int64_t r = 0; r < n; ++r) {
    const BatchRow& b = rows[size_t(r)];
    if (b.pages != prev) {
      prev = b.pages;
      ++seq;
      for (size_t i = 0; i < b.pages->size() && int64_t(i) < width; ++i) {
        TF_CHECK((*b.pages)[i] >= 0 && (*b.pages)[i] < kv_pages_, "KV page {} outside the pool of {}", (*b.pages)[i],
                 kv_pages_);
        L.table(h)[seq * width + int64_t(i)] = (*b.pages)[i];
      }
    }
    L.ids(h)[r] = b.token;
    L.pos(h)[r] = b.pos;
    L.row_seq(h)[r] = seq;
    if (b.want_logits) L.logit_idx(h)[n_logits++] = int32_t(r);
    if (half > 0) {
      const float* a = rope_block(b.pos / 1024) + (b.pos % 1024) * 2 * half;
      std::memcpy(L.cos(h) + r * half, a, size_t(half) * 4),
          std::memcpy(L.sin(h) + r * half, a + half, size_t(half) * 4);
    }
  }
  if (sampling) {
    TF_CHECK(int64_t(sampling->size()) == n_logits, "{} sampling rows for {} logits rows", sampling->size(), n_logits);
    for (int64_t i = 0; i < n_logits; ++i) {
      const RowSampling& s = (*sampling)[size_t(i)];
      L.samples(h)[i] = cuda::SampleRow{s.temperature, s.seed, s.pos, s.candidates ? 1 : 0};
    }
  }
  // Each sequence's keys as the prompt attention converts them once a layer.
  round_slots_ =
      cuda::prompt_key_layout(L.pos(h), L.row_seq(h), n, seq + 1, L.key_slot(h), L.key_count(h), round_tiles_);
  cuda::copy_to_device_async(staging_dev_, staging_host_, L.total(sampling != nullptr));
  round_seqs_ = seq + 1;
  return width;
}

void LlamaCudaModel::launch(int64_t n, int64_t m, int64_t width, bool sample, bool graph, bool prompt, int64_t off) {
  const auto& c = cfg_;
  const int64_t E = c.n_embd, D = c.head_dim_k, Dq = c.n_head * D, Dkv = kv_row_;
  Layout L{n, width, c.n_rot / 2};
  void* d = staging_dev_;
  const int64_t page_floats = page_size_ * kv_floats_per_token();
  const float scale = float(1.0 / std::sqrt(double(D)));
  const bool neox = c.rope_pairing == cpu::RopePairing::Neox;
  // One-row products wait on memory latency: their weights go to L2 beside the kernels that leave DRAM idle. Only in
  // graphs (launched one by one, the side launches cost more than they save) and only for one row, whose products
  // leave DRAM idlest.
  const bool prefetch = graph && n == 1 && cuda::prefetch_mode() != 0;
  cuda::SideJoin join{prefetch};  // every side launch is joined before the round ends
  // At most what attention reads a layer: a table of keys and values per row (the graph's key: rows and width).
  const bool short_keys = n * width * page_size_ * kv_row_ * 2 * int64_t(sizeof(float)) <= (int64_t(8) << 20);
  int64_t left = 0;  // what this fork's pulls may still take: together they fit in L2, or the last evict the first
  auto fork = [&] {
    if (prefetch) cuda::side_fork(), left = cuda::prefetch_budget();
  };
  auto pull = [&](const cuda::DeviceMatrix& w, double head = 1.0) {
    if (prefetch) left -= cuda::prefetch_weights(w, head, left);
  };
  // Prompt rows: their Q4_K and Q6_K products take the prompt kernels, whole (no partials).
  auto fp = [&](const DevWeight& w) { return prompt && cuda::gemv_prompt_takes(w); };
  auto prod = [&](const DevWeight& w, const float* x, int64_t rows, float* y, const float* res,
                  const cuda::SplitX& pre) {
    if (fp(w))
      cuda::gemv_prompt(w, x, rows, y, res);
    else
      cuda::gemv(w, x, rows, y, res, pre);
  };
  cuda::embedding(tok_embd_, L.ids(d), n, x_);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const DevLayer& Ly = layers_[size_t(il)];
    fork();  // beside the norm; the products of the previous layer would evict them
    const auto mats = Ly.matrices();
    int64_t layer_bytes = 0, layer_weights = 0;
    for (const DevWeight* w : mats) {
      if (!prefetch || !w->q) continue;
      layer_bytes += int64_t(cuda::device_matrix_bytes(w->type, w->n_in, w->n_out));
      layer_weights += w->n_in * w->n_out;
    }
    // A small model's whole layer fits in L2 many times over: all of it now, nothing beside attention.
    const bool whole = prefetch && layer_bytes <= (int64_t(16) << 20);
    // Above 6 bits a weight (Q6_K, Q8_0, BF16) the products keep DRAM busy, so pulls beside them only compete.
    const bool beside = prefetch && !whole && layer_bytes * 4 <= layer_weights * 3;
    for (const DevWeight* w : mats)
      if (w->q && (whole || (beside && (w == &Ly.wq || w == &Ly.wk || w == &Ly.wv)))) pull(*w);
    // The norm also writes x split for the tensor-core products, unless only prompt products (reading x) read it.
    const cuda::SplitX split_e = E % 64 == 0 ? cuda::SplitX{xs_, xsum_} : cuda::SplitX{};
    const bool qkv_f16 = fp(Ly.wq) && (Ly.fused_qkv || (fp(Ly.wk) && fp(Ly.wv)));
    const cuda::SplitX pre_e = qkv_f16 ? cuda::SplitX{} : split_e;
    // Prompt rows' Q, K and V read one staged x, which the stage normalises itself: h_ is not written.
    const bool norm_staged = qkv_f16 && !Ly.fused_qkv && !Ly.bq && !Ly.bk && !Ly.bv;
    if (norm_staged)
      cuda::gemv_prompt_stage_norm(Ly.wq, x_, Ly.attn_norm, c.rms_eps, n, h_);
    else
      cuda::rmsnorm(x_, Ly.attn_norm, n, E, c.rms_eps, h_, pre_e.xs, pre_e.xsum);
    // One stacked [Q | K | V] product, or three whose K and V may stay partials for rope_store to add.
    int64_t q_stride = Dq;
    const int64_t layer_offset = 2 * il * page_size_ * kv_row_;
    // One row: Q, K and V in one launch (the launches between them were most of K's and V's time), with RoPE and the
    // KV store in it where pairs are adjacent.
    bool roped = false;
    auto group_qkv = [&] {
      if (Ly.bq || Ly.bk || Ly.bv || fp(Ly.wq) || fp(Ly.wk) || fp(Ly.wv)) return false;
      const cuda::DeviceMatrix* w[3] = {&Ly.wq, &Ly.wk, &Ly.wv};
      float* y[3] = {q_, k_, v_};
      const cuda::RopeKv rk{true,     int(D),      int(c.n_rot / 2), int(Dkv),   L.cos(d),
                            L.sin(d), L.pos(d),    L.row_seq(d),     L.table(d), width,
                            kv_,      page_floats, layer_offset,     page_size_};
      if (!neox && c.n_rot % 2 == 0 && cuda::gemv_group_ropes() && cuda::gemv_group(w, y, 3, h_, n, pre_e, rk))
        return roped = true;
      return cuda::gemv_group(w, y, 3, h_, n, pre_e);
    };
    cuda::KvSource ks{k_, 0, Dkv}, vs{v_, 0, Dkv};
    if (Ly.fused_qkv) {
      prod(Ly.wq, h_, n, q_, nullptr, pre_e);
      if (Ly.bq) cuda::add_bias(q_, Ly.bq, n, Dq + 2 * Dkv);
      q_stride = Dq + 2 * Dkv;
      ks = {q_ + Dq, 0, q_stride}, vs = {q_ + Dq + Dkv, 0, q_stride};
    } else if (qkv_f16 && norm_staged && Ly.qkv.f16w) {
      // Prompt rows: Q|K|V from their stacked image, one product of one wave, stored as the stacked rows above.
      cuda::gemv_prompt(Ly.qkv, h_, n, q_, nullptr, true);
      q_stride = Dq + 2 * Dkv;
      ks = {q_ + Dq, 0, q_stride}, vs = {q_ + Dq + Dkv, 0, q_stride};
    } else if (!Ly.bq && !Ly.bk && !Ly.bv &&
               (qkv_f16 || (n > cuda::gemv_split_rows() && !fp(Ly.wq) && !fp(Ly.wk) && !fp(Ly.wv) &&
                            cuda::gemv_stage(Ly.wq, n, pre_e)))) {
      // x staged once (prompt rows' above), then K and V beside Q: their grids alone would leave SMs idle.
      cuda::SplitX st = pre_e;
      st.staged = true;
      auto staged = [&](const DevWeight& w, float* y) {
        if (qkv_f16)
          cuda::gemv_prompt(w, h_, n, y, nullptr, true);
        else
          cuda::gemv(w, h_, n, y, nullptr, st);
      };
      cuda::side_fork();
      cuda::SideJoin qkv_join;
      {
        cuda::SideLaunches side;
        staged(Ly.wk, k_);
        staged(Ly.wv, v_);
      }
      staged(Ly.wq, q_);
      qkv_join.on = false;
      TF_CHECK(cuda::side_join(), "CUDA refused to join the K and V products' stream");
    } else if (group_qkv()) {
      // K and V written whole (or already in the page): nothing for rope_store to add
    } else {
      prod(Ly.wq, h_, n, q_, nullptr, pre_e);
      if (Ly.bk || Ly.bv || fp(Ly.wk) || fp(Ly.wv)) {  // a bias comes after the slices are added
        prod(Ly.wk, h_, n, k_, nullptr, pre_e);
        prod(Ly.wv, h_, n, v_, nullptr, pre_e);
        if (Ly.bk) cuda::add_bias(k_, Ly.bk, n, Dkv);
        if (Ly.bv) cuda::add_bias(v_, Ly.bv, n, Dkv);
      } else {
        const cuda::Partials kp = cuda::gemv_partials(Ly.wk, h_, n, k_, pre_e, kpart_);
        const cuda::Partials vp = cuda::gemv_partials(Ly.wv, h_, n, v_, pre_e, vpart_);
        if (kp.p) ks = {kp.p, kp.slices, Dkv};
        if (vp.p) vs = {vp.p, vp.slices, Dkv};
      }
      if (Ly.bq) cuda::add_bias(q_, Ly.bq, n, Dq);
    }
    // Beside RoPE and attention: o, and the first half of each gate|up tile (what its first blocks read), or as much
    // as fits in L2 beside o. Not where attention itself streams megabytes of keys and values from DRAM.
    if (short_keys && beside) {
      fork();
      pull(Ly.wo);
      pull(Ly.gate, 0.5);
    }
    if (!roped)
      cuda::rope_store(q_, q_stride, c.n_head, ks, vs, n, D, c.n_rot, L.cos(d), L.sin(d), neox, L.pos(d), L.row_seq(d),
                       L.table(d), width, kv_, page_floats, layer_offset, page_size_, kv_row_);
    cuda::PagedKv kv{kv_, page_floats, layer_offset, page_size_, kv_row_, L.table(d), width};
    // One attention kernel per row kind, whatever the row count, so a row's bits never depend on its round.
    cuda::SplitX pre_o;
    if (prompt && cuda::attention_prompt_supports(D, c.n_head, c.n_head_kv)) {
      // Prompt rows: one fp16 mma a step, like their products; the output product splits its x itself.
      // Its keys converted once for all blocks where the round's fit the scratch (the same bits either way).
      const cuda::PromptKeys pk{prompt_keys_,  L.key_slot(d),    L.key_count(d),
                                prompt_slots_, int(round_seqs_), int(round_tiles_)};
      const bool conv = prompt_keys_ && round_slots_ <= prompt_slots_;
      cuda::attention_prompt(q_, q_stride, n, L.pos(d), L.row_seq(d), kv, c.n_head, c.n_head_kv, D, scale, att_,
                             conv ? &pk : nullptr);
    } else if (cuda::attention_mma_supports(D, c.n_head, c.n_head_kv)) {
      if (Dq % 64 == 0 && !fp(Ly.wo)) pre_o = {xs_, xsum_};  // Q|K|V's split is spent; the output product reads this
      // No row holds more keys than the pool, which the partials were sized for.
      const int64_t keys = std::min(width * page_size_, att_keys_);
      const cuda::AttnChunks chunks{att_part_, kAttnChunkRows,
                                    (att_keys_ + cuda::kAttnChunkKeys - 1) / cuda::kAttnChunkKeys, keys, round_seqs_};
      cuda::attention_mma(q_, q_stride, n, L.pos(d), L.row_seq(d), kv, c.n_head, c.n_head_kv, D, scale, att_, pre_o.xs,
                          pre_o.xsum, chunks);
    } else
      cuda::attention(q_, q_stride, n, L.pos(d), L.row_seq(d), kv, c.n_head, c.n_head_kv, D, scale, width * page_size_,
                      att_);
    // Residual adds ride on the products (one rounding, as a separate add), unless a bias comes between.
    if (Ly.bo) {
      prod(Ly.wo, att_, n, o_, nullptr, pre_o);
      cuda::add_bias(o_, Ly.bo, n, E);
      cuda::add_inplace(x_, o_, n * E);
    } else {
      prod(Ly.wo, att_, n, x_, x_, pre_o);
    }
    if (Ly.fused_ffn && fp(Ly.gate) && fp(Ly.down)) {
      // Prompt rows: the stages make RMSNorm and SwiGLU themselves (their kernels' bits), so neither is stored.
      cuda::gemv_prompt_stage_norm(Ly.gate, x_, Ly.ffn_norm, c.rms_eps, n, h_);
      cuda::gemv_prompt(Ly.gate, h_, n, g_, nullptr, true);
      cuda::gemv_prompt_stage_swiglu(Ly.down, g_, n);
      cuda::gemv_prompt(Ly.down, g_, n, x_, x_, true);
    } else {
      const cuda::SplitX pre_g = fp(Ly.gate) && (Ly.fused_ffn || fp(Ly.up)) ? cuda::SplitX{} : split_e;
      cuda::rmsnorm(x_, Ly.ffn_norm, n, E, c.rms_eps, h_, pre_g.xs, pre_g.xsum);
      cuda::SplitX pre_f;
      if (Ly.fused_ffn) {
        if (c.n_ff % 64 == 0) {
          cuda::Partials gp;  // SwiGLU adds any slices
          if (fp(Ly.gate))
            prod(Ly.gate, h_, n, g_, nullptr, pre_g);
          else
            gp = cuda::gemv_partials(Ly.gate, h_, n, g_, pre_g);
          if (!fp(Ly.down) || gp.p) pre_f = {xs_, xsum_};  // SwiGLU adds partials only into a split output
          cuda::swiglu_pairs(g_, n, c.n_ff, u_, pre_f.xs, pre_f.xsum, gp);
        } else {
          prod(Ly.gate, h_, n, g_, nullptr, pre_g);
          cuda::swiglu_pairs(g_, n, c.n_ff, u_);
        }
      } else {
        prod(Ly.gate, h_, n, g_, nullptr, pre_g);
        prod(Ly.up, h_, n, u_, nullptr, pre_g);
        cuda::swiglu(g_, u_, u_, n * c.n_ff);
      }
      prod(Ly.down, u_, n, x_, x_, pre_f);
    }
  }
  if (m == 0) return;
  cuda::gather_rows(x_, L.logit_idx(d), m, E, h_);
  cuda::rmsnorm(h_, output_norm_, m, E, c.rms_eps, o_);
  float* logits = logits_ + off * c.n_vocab;
  prod(output_, o_, m, logits, nullptr, {});
  if (sample)
    cuda::candidates(logits, m, c.n_vocab, L.samples(d), static_cast<cuda::RowCandidatesDev*>(cand_) + off,
                     cand_scratch_);
}

void LlamaCudaModel::run(const std::vector<BatchRow>& rows, const std::vector<RowSampling>* sampling, int64_t& n_logits,
                         bool prompt, int64_t off) {
  const int64_t n = int64_t(rows.size());
  const int64_t width = stage_inputs(rows, sampling, n_logits, off);
  const bool sample = sampling != nullptr;
  struct Events {  // destroyed however the round ends: event_ms is where a kernel's fault usually surfaces
    void *t0 = nullptr, *t1 = nullptr;
    ~Events() {
      for (void* e : {t0, t1})
        if (e) cuda::event_destroy(e);
    }
  } ev;
  ev.t0 = cuda::event_record_now();
  const auto h0 = std::chrono::steady_clock::now();
  if (graphs_on_ && !prompt && n_logits == n && n <= kMaxGraphRows) {
    // Decode-shaped rounds: every input sits at a fixed staging address, so one graph per shape replays them.
    if (graphs_generation_ != cuda::gemv_scratch_generation()) drop_graphs();
    graphs_generation_ = cuda::gemv_scratch_generation();
    // Whether each row is its own sequence picks attention's build, so a graph holds it too.
    auto key = std::make_tuple(n, width, sample, round_seqs_ >= n);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      cuda::capture_begin();
      try {
        launch(n, n_logits, width, sample, true, prompt, off);
      } catch (...) {
        cuda::capture_abort();  // not instantiated: the partial graph could fail too and hide this error
        throw;
      }
      it = graphs_.emplace(key, cuda::capture_end()).first;
    }
    cuda::graph_launch(it->second);
  } else {
    launch(n, n_logits, width, sample, false, prompt, off);
  }
  ev.t1 = cuda::event_record_now();
  last_launch_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - h0).count();
  last_device_ms_ = cuda::event_ms(ev.t0, ev.t1);
}

int64_t LlamaCudaModel::run_round(const std::vector<BatchRow>& rows, const std::vector<RowSampling>* sampling) {
  bool any_prompt = false, any_decode = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    (prompt_f16_ && rows[i].prompt ? any_prompt : any_decode) = true;
    TF_CHECK(i == 0 || rows[i].pages != rows[i - 1].pages || rows[i].prompt == rows[i - 1].prompt,
             "a sequence's rows of one forward must all be prompt rows or all not (row {})", i);
  }
  logit_slot_.clear();
  last_logit_rows_ = 0;
  int64_t m = 0;
  if (!any_prompt || !any_decode) {
    run(rows, sampling, m, any_prompt, 0);
    for (int64_t i = 0; i < m; ++i) logit_slot_.push_back(i);
    return m;
  }
  // Two forwards, decode rows first (a sequence's rows are all of one kind); buffers sized for the whole round first.
  std::vector<BatchRow> part[2];
  std::vector<RowSampling> samp[2];
  std::vector<int64_t> order[2];
  int64_t max_pages = 1;
  for (const BatchRow& r : rows) {
    const int p = r.prompt ? 1 : 0;
    part[p].push_back(r);
    if (r.pages) max_pages = std::max<int64_t>(max_pages, int64_t(r.pages->size()));
    if (!r.want_logits) continue;
    const int64_t k = int64_t(order[0].size() + order[1].size());
    TF_CHECK(!sampling || k < int64_t(sampling->size()), "fewer sampling rows than logits rows");
    order[p].push_back(k);
    if (sampling) samp[p].push_back((*sampling)[size_t(k)]);
  }
  const int64_t n = int64_t(rows.size()), logit_rows = int64_t(order[0].size() + order[1].size());
  TF_CHECK(!sampling || int64_t(sampling->size()) == logit_rows, "{} sampling rows for {} logits rows",
           sampling ? sampling->size() : 0, logit_rows);
  if (n > kCudaMaxRows) fail("a forward of {} rows: the CUDA kernels take at most {}", n, kCudaMaxRows);
  ensure_capacity(n, logit_rows, n * cuda_table_width(std::min(max_pages, kMaxKeys / page_size_ + 1), page_size_));
  int64_t m0 = 0, m1 = 0;
  run(part[0], sampling ? &samp[0] : nullptr, m0, false, 0);
  const double ms = last_device_ms_;
  cuda::stream_sync();  // the second forward restages the same host buffer (run's timing has waited already)
  const double host = last_launch_ms_;
  run(part[1], sampling ? &samp[1] : nullptr, m1, true, m0);
  last_device_ms_ += ms, last_launch_ms_ += host;
  logit_slot_.assign(size_t(logit_rows), 0);
  for (int64_t i = 0; i < m0; ++i) logit_slot_[size_t(order[0][size_t(i)])] = i;
  for (int64_t i = 0; i < m1; ++i) logit_slot_[size_t(order[1][size_t(i)])] = m0 + i;
  return logit_rows;
}

void LlamaCudaModel::forward(const std::vector<BatchRow>& rows, float* logits) {
  if (rows.empty()) return;
  const int64_t m = run_round(rows, nullptr), V = cfg_.n_vocab;
  last_logit_rows_ = m;
  bool in_order = true;
  for (int64_t i = 0; i < m; ++i) in_order = in_order && logit_slot_[size_t(i)] == i;
  if (in_order && m)
    cuda::copy_to_host_async(logits, logits_, size_t(m * V) * sizeof(float));
  else
    for (int64_t i = 0; i < m; ++i)
      cuda::copy_to_host_async(logits + i * V, logits_ + logit_slot_[size_t(i)] * V, size_t(V) * sizeof(float));
  cuda::stream_sync();
}

void LlamaCudaModel::forward_sample(const std::vector<BatchRow>& rows, const std::vector<RowSampling>& sampling,
                                    std::vector<RowCandidates>& out) {
  out.clear();
  if (rows.empty()) return;
  // Without candidates a row gets its argmax alone, which only a greedy draw may take.
  for (size_t i = 0; i < sampling.size(); ++i)
    if (!sampling[i].candidates && sampling[i].temperature > 0)
      fail("sampling row {} at temperature {} asks for no candidates", i, sampling[i].temperature);
  const int64_t m = run_round(rows, &sampling);
  last_logit_rows_ = m;
  cand_host_.resize(size_t(m) * sizeof(cuda::RowCandidatesDev));
  if (m) cuda::copy_to_host_async(cand_host_.data(), cand_, cand_host_.size());
  cuda::stream_sync();
  out.resize(size_t(m));
  for (int64_t i = 0; i < m; ++i) {
    const auto* d = reinterpret_cast<const cuda::RowCandidatesDev*>(cand_host_.data()) + logit_slot_[size_t(i)];
    if (d->nan) fail("logits row {} holds NaN", i);
    // A row with no finite logit has no candidate to give (its argmax is the kernel's out-of-range sentinel).
    if (d->greedy < 0 || d->greedy >= cfg_.n_vocab) fail("logits row {} has no finite value", i);
    RowCandidates& r = out[size_t(i)];
    r.greedy = d->greedy, r.gumbel = d->gumbel, r.gumbel_logit = d->gumbel_logit;
    r.lse = d->lse, r.max_t = d->max_t, r.sum_t = d->sum_t;
    r.complete = d->n >= cfg_.n_vocab;
    r.top.resize(size_t(d->n));
    for (int32_t j = 0; j < d->n; ++j) r.top[size_t(j)] = {d->logit[j], d->id[j]};
    std::sort(r.top.begin(), r.top.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
  }
}

void LlamaCudaModel::last_logits_row(int64_t k, float* out) {
  TF_CHECK(k >= 0 && k < last_logit_rows_, "logits row {} outside the last forward's {}", k, last_logit_rows_);
  cuda::copy_to_host(out, logits_ + logit_slot_[size_t(k)] * cfg_.n_vocab, size_t(cfg_.n_vocab) * sizeof(float));
}

}  // namespace tf
