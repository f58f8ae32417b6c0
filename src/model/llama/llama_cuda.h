#pragma once
#include <array>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_gemv.h"
#include "io/gguf.h"
#include "model/llama/llama_config.h"
#include "model/model.h"

namespace tf {

// The most rows one forward takes: kernels put rows on grid dimension y, which CUDA caps at 65,535.
constexpr int64_t kCudaMaxRows = 65535;
// The page-table width a round's sequences of up to max_pages pages are staged with.
int64_t cuda_table_width(int64_t max_pages, int64_t page_size);
// Rows up to which decode attention runs a block per 256-key chunk (their partials are sized for this many).
constexpr int64_t kAttnChunkRows = 32;

// The llama family on one CUDA device: weights copied to device memory as the file stores them, KV pages on the
// device, every kernel row-invariant, decode-shaped rounds replayed as CUDA graphs.
class LlamaCudaModel : public Model {
 public:
  explicit LlamaCudaModel(std::shared_ptr<const GgufFile> file);
  ~LlamaCudaModel() override;
  const ModelInfo& info() const override { return info_; }
  int64_t kv_floats_per_token() const override { return cfg_.n_layer * 2 * kv_row_; }
  void bind_kv(int64_t n_pages, int64_t page_size) override;
  void reserve_rounds(int64_t max_rows, int64_t max_logit_rows, int64_t max_positions) override;
  void forward(const std::vector<BatchRow>& rows, float* logits) override;
  bool device_sampling() const override { return true; }
  void forward_sample(const std::vector<BatchRow>& rows, const std::vector<RowSampling>& sampling,
                      std::vector<RowCandidates>& out) override;
  // Per-call switches and timings for the benchmark: graphs on or off, and the last call's device milliseconds.
  void set_graphs(bool on) override { graphs_on_ = on; }
  std::string memory_note() const override;
  size_t prompt_image_bytes() const { return images_ ? image_want_ : 0; }  // held now
  int64_t stacked_qkv_layers() const;  // layers whose prompt rows read Q|K|V from one stacked image now
  size_t kv_pool_bytes(int64_t n_pages, int64_t page_size) const;  // what bind_kv allocates for that pool
  double last_device_ms() const override { return last_device_ms_; }
  double last_launch_ms() const override { return last_launch_ms_; }
  void last_logits_row(int64_t k, float* out) override;
  bool prompt_arithmetic_differs() const override { return prompt_f16_; }

  using DevWeight = cuda::DeviceMatrix;
  // Fused layers keep Q|K|V in wq (and bq) and gate|up in gate, rows stacked.
  struct DevLayer {
    bool fused_qkv = false, fused_ffn = false;
    DevWeight wq, wk, wv, wo, gate, up, down;
    DevWeight qkv;  // prompt rows' Q|K|V as one stacked wide image (qkv.f16w), where images are held and it pays
    const float *attn_norm = nullptr, *ffn_norm = nullptr, *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
    std::array<DevWeight*, 7> matrices() { return {&wq, &wk, &wv, &wo, &gate, &up, &down}; }
    std::array<const DevWeight*, 7> matrices() const { return {&wq, &wk, &wv, &wo, &gate, &up, &down}; }
  };

 private:
  void ensure_capacity(int64_t n_rows, int64_t n_logit_rows, int64_t table_ints);
  void drop_graphs();
  size_t kv_bytes(int64_t n_pages, int64_t page_size) const;  // the pool's keys and values alone
  size_t att_part_bytes(int64_t n_pages, int64_t page_size) const;
  int64_t prompt_key_slots(int64_t n_pages, int64_t page_size) const;  // converted prompt keys the partials hold
  // A block's cos and sin rows of n_rot / 2 floats each, a position after another.
  const float* rope_block(int64_t block);
  void build_prompt_images();  // the prompt products' fp16 weights, where TF_CUDA_PROMPT_IMAGE and memory allow
  bool drop_prompt_images(const char* for_what);  // frees unasked images for memory the engine needs; false if none
  // Graphs, pinned staging and device memory, for the destructor or a failed load only: other state is left stale.
  void release_device() noexcept;
  std::string image_hint() const;  // for a refusal: the images' size where TF_CUDA_PROMPT_IMAGE=1 keeps them
  size_t product_scratch(int64_t rows) const;  // what gemv() needs for up to `rows` rows over every matrix
  int64_t partial_floats(DevWeight DevLayer::*m, int64_t rows) const;  // the largest layer's partials of that matrix
  int64_t stage_inputs(const std::vector<BatchRow>& rows, const std::vector<RowSampling>* sampling, int64_t& n_logits,
                       int64_t off);
  // `prompt`: prompt rows, whose Q4_K and Q6_K products take gemv_prompt (never in a graph); logits from row `off`.
  void launch(int64_t n, int64_t m, int64_t max_pages, bool sample, bool graph, bool prompt, int64_t off);
  void run(const std::vector<BatchRow>& rows, const std::vector<RowSampling>* sampling, int64_t& n_logits, bool prompt,
           int64_t off);
  // Runs a round (decode rows, then prompt rows where their arithmetic differs); returns its logits rows.
  int64_t run_round(const std::vector<BatchRow>& rows, const std::vector<RowSampling>* sampling);

  std::shared_ptr<const GgufFile> file_;
  LlamaConfig cfg_;
  ModelInfo info_;
  int64_t kv_row_ = 0;
  std::vector<float> rope_freqs_;
  // rope_angles of 1,024-position blocks, each made when a row first reaches it
  std::vector<std::vector<float>> rope_blocks_;
  void* weights_ = nullptr;    // one device allocation holding every tensor
  void* images_ = nullptr;     // the prompt images of every layer matrix that has one, or none
  size_t image_want_ = 0;      // what the images take (or would)
  std::string image_why_;      // why there are none
  bool images_asked_ = false;  // built under TF_CUDA_PROMPT_IMAGE=1, so never given back
  DevWeight tok_embd_, output_;
  const float* output_norm_ = nullptr;
  std::vector<DevLayer> layers_;
  float* kv_ = nullptr;
  int64_t kv_pages_ = 0, page_size_ = 0;
  // Scratch and staging, sized for cap_rows_ rows (cap_logits_ of them with logits) and cap_table_ page-table ints.
  int64_t cap_rows_ = 0, cap_logits_ = 0, cap_table_ = 0;
  void* scratch_ = nullptr;
  void* staging_dev_ = nullptr;
  void* staging_host_ = nullptr;
  size_t staging_bytes_ = 0;
  float *x_ = nullptr, *h_ = nullptr, *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *att_ = nullptr, *o_ = nullptr,
        *g_ = nullptr, *u_ = nullptr, *logits_ = nullptr;
  float *xs_ = nullptr, *xsum_ = nullptr;      // a norm's or SwiGLU's output split for the products that read it
  float *kpart_ = nullptr, *vpart_ = nullptr;  // K and V products' slice partials, added by rope_store
  void* cand_ = nullptr;
  void* cand_scratch_ = nullptr;
  float* att_part_ = nullptr;  // chunk-parallel attention's partial states (kAttnChunkRows rows, att_keys_ keys)
  size_t att_part_bytes_ = 0;
  int64_t att_keys_ = 0;
  void* prompt_keys_ = nullptr;  // in att_part_: prompt keys converted once a layer (cuda::PromptKeys), or none
  int64_t prompt_slots_ = 0;
  int64_t round_seqs_ = 0;                     // sequences among the staged round's rows
  int64_t round_slots_ = 0, round_tiles_ = 0;  // their keys' slots and the most 32-key tiles of one
  bool graphs_on_ = true;
  double last_device_ms_ = 0, last_launch_ms_ = 0;
  int64_t last_logit_rows_ = 0;
  bool prompt_f16_ = false;                                     // some product takes gemv_prompt for prompt rows
  std::vector<int64_t> logit_slot_;                             // the device row of each logits row of the last round
  // Decode rounds: (rows, table width, sampling, each row its own sequence).
  std::map<std::tuple<int64_t, int64_t, bool, bool>, void*> graphs_;
  uint64_t graphs_generation_ = 0;                              // the product scratch the graphs captured
  std::vector<char> cand_host_;
};

// Checks every tensor against what the CUDA kernels read ("" when it can run); a bad TF_* switch throws tf::Error.
std::string llama_cuda_refusal(const GgufFile& f);
// For `info`: the prompt images a load would build or leave out with `free_bytes` free, and whether it would refuse.
std::pair<std::string, bool> llama_cuda_memory_note(const GgufFile& f, size_t free_bytes);

}  // namespace tf
