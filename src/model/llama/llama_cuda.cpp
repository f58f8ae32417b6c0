#include "model/llama/llama_cuda.h"

#include <algorithm>
#include <map>

#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_gemv.h"
#include "backend/cuda/cuda_sample.h"
#include "base/error.h"
#include "model/llama/llama_model.h"
#include "quant/ggml/dequant.h"

namespace tf {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The tensors the forward reads, in upload order: matrices as the file stores them, vectors decoded to f32. An item
// of several parts stacks their rows (Q, K, V; gate, up) so one kernel computes them all.
struct Plan {
  struct Item {
    std::string name;
    std::vector<std::string> parts;
    bool matrix;
    int64_t n_in, n_out;
    bool table;  // read by the embedding lookup, not by products
    size_t offset, bytes;
  };
  std::vector<Item> items;
  size_t total = 0;
};

std::string matrix_refusal(const GgufFile& f, const std::string& name, int64_t n_in, int64_t n_out) {
  const GgufTensor* t = f.tensor(name);
  if (!t) return fmt::format("tensor '{}' is missing", name);
  if (t->ne.size() != 2 || t->ne[0] != n_in || t->ne[1] != n_out)
    return fmt::format("tensor '{}' has shape [{}], expected [{}, {}]", name, fmt::join(t->ne, ", "), n_in, n_out);
  if (!cuda::gemv_supports(t->type))
    return fmt::format(
        "tensor '{}' has format {}, which the CUDA backend cannot read (it reads F32, F16, BF16, Q4_0, "
        "Q4_1, Q8_0, Q4_K, Q6_K)",
        name, ggml_type_name(t->type));
  if (n_in % cuda::gemv_block_elems(t->type) != 0)
    return fmt::format("tensor '{}': rows of {} are not whole {} blocks", name, n_in, ggml_type_name(t->type));
  return {};
}

Plan plan_tensors(const GgufFile& f, const LlamaConfig& c) {
  Plan p;
  const int64_t E = c.n_embd, Dq = c.n_head * c.head_dim_k, Dkv = c.n_head_kv * c.head_dim_k;
  auto mat = [&](const std::string& name, int64_t n_in, int64_t n_out, bool table = false,
                 const std::string& source = {}) {
    const std::string& src = source.empty() ? name : source;
    if (auto why = matrix_refusal(f, src, n_in, n_out); !why.empty()) fail("{}: {}", f.path(), why);
    const size_t bytes = cuda::device_matrix_bytes(f.tensor(src)->type, n_in, n_out, table);
    p.items.push_back({name, {src}, true, n_in, n_out, table, p.total, bytes});
    p.total += align_up(bytes);
  };
  auto vec = [&](const std::string& name, int64_t n, bool required) {
    if (!f.tensor(name)) {
      if (required) fail("{}: tensor '{}' is missing", f.path(), name);
      return;
    }
    p.items.push_back({name, {name}, false, n, 1, false, p.total, size_t(n) * 4});
    p.total += align_up(size_t(n) * 4);
  };
  // Stacks same-format matrices (and their biases, all or none) into one item named `key`; false when it cannot.
  auto stacked = [&](const std::string& key, const std::vector<std::string>& names, const std::vector<int64_t>& outs,
                     int64_t n_in, const std::vector<std::string>& biases) {
    for (size_t i = 0; i < names.size(); ++i)
      if (auto why = matrix_refusal(f, names[i], n_in, outs[i]); !why.empty()) fail("{}: {}", f.path(), why);
    size_t with_bias = 0;
    for (auto& b : biases) with_bias += f.tensor(b) != nullptr;
    for (auto& nm : names)
      if (f.tensor(nm)->type != f.tensor(names[0])->type) return false;
    if (with_bias != 0 && with_bias != biases.size()) return false;
    int64_t total = 0;
    for (int64_t o : outs) total += o;
    const size_t bytes = cuda::device_matrix_bytes(f.tensor(names[0])->type, n_in, total);
    p.items.push_back({key, names, true, n_in, total, false, p.total, bytes});
    p.total += align_up(bytes);
    if (with_bias) {
      p.items.push_back({key + ".bias", biases, false, total, 1, false, p.total, size_t(total) * 4});
      p.total += align_up(size_t(total) * 4);
    }
    return true;
  };
  // The lookup table and the output product read different layouts, so tied embeddings are uploaded twice.
  mat("token_embd.weight", E, c.n_vocab, true);
  mat("output.weight", E, c.n_vocab, false, f.tensor("output.weight") ? "" : "token_embd.weight");
  vec("output_norm.weight", E, true);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    vec(b + "attn_norm.weight", E, true);
    vec(b + "ffn_norm.weight", E, true);
    if (!stacked(b + "attn_qkv", {b + "attn_q.weight", b + "attn_k.weight", b + "attn_v.weight"}, {Dq, Dkv, Dkv}, E,
                 {b + "attn_q.bias", b + "attn_k.bias", b + "attn_v.bias"})) {
      mat(b + "attn_q.weight", E, Dq);
      mat(b + "attn_k.weight", E, Dkv);
      mat(b + "attn_v.weight", E, Dkv);
      vec(b + "attn_q.bias", Dq, false);
      vec(b + "attn_k.bias", Dkv, false);
      vec(b + "attn_v.bias", Dkv, false);
    }
    mat(b + "attn_output.weight", Dq, E);
    vec(b + "attn_output.bias", E, false);
    if (!stacked(b + "ffn_gate_up", {b + "ffn_gate.weight", b + "ffn_up.weight"}, {c.n_ff, c.n_ff}, E, {})) {
      mat(b + "ffn_gate.weight", E, c.n_ff);
      mat(b + "ffn_up.weight", E, c.n_ff);
    }
    mat(b + "ffn_down.weight", c.n_ff, E);
  }
  return p;
}

// The prompt images' memory rule, at load and for `info`: unasked, at most a quarter of what is free; asked or not,
// 256 MiB beside them. `why` says why there are none, or why TF_CUDA_PROMPT_IMAGE=1 refuses the load.
struct ImageRule {
  bool build = false, refuse = false;
  std::string why;
};

ImageRule image_rule(size_t want, size_t free, int mode) {
  const double want_gib = double(want) / double(1ull << 30), free_gib = double(free) / double(1ull << 30);
  if (mode == 0) return {false, false, "TF_CUDA_PROMPT_IMAGE=0"};
  if (mode < 0 && want > free / 4)
    return {false, false,
            fmt::format("more than a quarter of the {:.2f} GiB free; TF_CUDA_PROMPT_IMAGE=1 keeps them", free_gib)};
  if (want + (size_t(1) << 28) <= free) return {true, false, {}};
  if (mode < 0) return {false, false, fmt::format("only {:.2f} GiB free", free_gib)};
  return {
      false, true,
      fmt::format("TF_CUDA_PROMPT_IMAGE=1: the prompt images need {:.2f} GiB of device memory but {:.2f} GiB is free",
                  want_gib, free_gib)};
}

// The note `info` and a loaded model print for images left out (`want` bytes) and why.
std::string images_none_note(size_t want, const std::string& why) {
  return fmt::format("prompt images: none ({:.2f} GiB): {}", double(want) / double(1ull << 30), why);
}

}  // namespace

std::pair<std::string, bool> llama_cuda_memory_note(const GgufFile& f, size_t free_bytes) {
  const Plan plan = plan_tensors(f, llama_config_from_gguf(f));
  size_t want = 0;
  std::map<std::string, std::vector<const Plan::Item*>> qkv;  // a layer's separate Q, K and V, which may stack
  for (const Plan::Item& it : plan.items)
    if (it.matrix && !it.table && it.name.rfind("blk.", 0) == 0) {
      const std::string layer = it.name.substr(0, it.name.find('.', 4) + 1);
      for (const char* m : {"attn_q.", "attn_k.", "attn_v."})
        if (it.name == layer + m + "weight") qkv[layer].push_back(&it);
      if (const size_t n = cuda::prompt_image_bytes_for(f.tensor(it.parts[0])->type, it.n_in, it.n_out); n > 0)
        want += align_up(n);
    }
  for (const auto& [layer, its] : qkv) {  // what the load will hold: one stacked image instead of three
    if (its.size() != 3) continue;
    std::vector<GgmlType> types;
    std::vector<int64_t> outs;
    size_t apart = 0;
    for (const Plan::Item* it : its) {
      types.push_back(f.tensor(it->parts[0])->type), outs.push_back(it->n_out);
      apart += align_up(cuda::prompt_image_bytes_for(types.back(), it->n_in, it->n_out));
    }
    bool bias = false;
    for (const char* m : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) bias = bias || f.tensor(layer + m) != nullptr;
    if (const size_t n = cuda::prompt_image_stack_bytes_for(types, its[0]->n_in, outs); n > 0 && !bias)
      want += align_up(n) - apart;
  }
  if (want == 0 || plan.total > free_bytes) return {};
  const ImageRule r = image_rule(want, free_bytes - plan.total, cuda::prompt_image_mode());
  const double gib = double(want) / double(1ull << 30);
  if (r.build)
    return {fmt::format("prompt images: up to {:.2f} GiB more, fp16 weights for prompt products (given back first "
                        "when the KV pool or round scratch need the memory)",
                        gib),
            false};
  if (r.refuse) return {fmt::format("prompt images: {}; the load would be refused", r.why), true};
  return {images_none_note(want, r.why), false};
}

std::string llama_cuda_refusal(const GgufFile& f) {
  cuda::read_switches();  // a bad developer switch is the user's error, not a reason to fall back to the CPU
  try {
    LlamaConfig c = llama_config_from_gguf(f);
    if (c.head_dim_k % 32 != 0 || c.head_dim_k > 256)
      return fmt::format("head size {} is not supported by the CUDA attention kernel (multiples of 32 up to 256)",
                         c.head_dim_k);
    if (c.n_vocab > cuda::kMaxSampledVocab)
      return fmt::format("a vocabulary of {} entries is larger than the CUDA sampler takes ({})", c.n_vocab,
                         cuda::kMaxSampledVocab);
    const Plan plan = plan_tensors(f, c);
    // Weights that do not fit are refused here, so --backend auto can still run the model on the CPU.
    const cuda::DeviceInfo dev = cuda::device_info(0);
    if (plan.total + (size_t(1) << 28) > dev.free_bytes)
      return fmt::format("the weights need {:.2f} GiB of device memory but {} has {:.2f} GiB free",
                         double(plan.total) / double(1ull << 30), dev.name,
                         double(dev.free_bytes) / double(1ull << 30));
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

LlamaCudaModel::LlamaCudaModel(std::shared_ptr<const GgufFile> file)
    : file_(std::move(file)), cfg_(llama_config_from_gguf(*file_)), info_(llama_inspect(*file_)) {
  const GgufFile& f = *file_;
  if (auto why = llama_cuda_refusal(f); !why.empty()) fail("{}", why);
  kv_row_ = cfg_.n_head_kv * cfg_.head_dim_k;
  Plan plan = plan_tensors(f, cfg_);
  cuda::DeviceInfo dev = cuda::device_info(0);
  if (plan.total + (size_t(1) << 28) > dev.free_bytes)
    fail("{}: the weights need {:.2f} GiB of device memory but {} has {:.2f} GiB free", f.path(),
         double(plan.total) / double(1ull << 30), dev.name, double(dev.free_bytes) / double(1ull << 30));
  weights_ = cuda::device_alloc(plan.total);
  try {  // a refusal from here on gives the device memory back: a failed constructor runs no destructor
    auto* base = static_cast<uint8_t*>(weights_);
    std::map<std::string, const Plan::Item*> by_name;
    std::map<std::string, DevWeight> mats;
    std::vector<float> tmp;
    std::vector<uint8_t> rows;
    for (const auto& it : plan.items) {
      const GgufTensor* t0 = f.tensor(it.parts[0]);
      if (it.matrix) {
        const void* src = t0->data;
        if (it.parts.size() > 1) {  // stacked rows: the parts' bytes one after another
          rows.clear();
          for (auto& part : it.parts) {
            const GgufTensor* t = f.tensor(part);
            rows.insert(rows.end(), static_cast<const uint8_t*>(t->data),
                        static_cast<const uint8_t*>(t->data) + t->nbytes);
          }
          src = rows.data();
        }
        mats[it.name] = cuda::upload_matrix(t0->type, src, it.n_in, it.n_out, base + it.offset, it.table);
      } else {
        tmp.clear();
        for (auto& part : it.parts) {
          const GgufTensor* t = f.tensor(part);
          const size_t at = tmp.size();
          tmp.resize(at + size_t(t->n_elements()));
          if (!quant::dequantize(t->type, t->data, tmp.data() + at, t->n_elements()))
            fail("{}: tensor '{}' has format {} which cannot be decoded", f.path(), part, ggml_type_name(t->type));
        }
        if (int64_t(tmp.size()) != it.n_in)
          fail("{}: tensor '{}' has {} elements, expected {}", f.path(), it.name, tmp.size(), it.n_in);
        cuda::copy_to_device(base + it.offset, tmp.data(), it.bytes);
      }
      by_name[it.name] = &it;
    }
    auto W = [&](const std::string& name) { return mats.at(name); };
    auto V = [&](const std::string& name) -> const float* {
      auto i = by_name.find(name);
      return i == by_name.end() ? nullptr : reinterpret_cast<const float*>(base + i->second->offset);
    };
    tok_embd_ = W("token_embd.weight");
    output_ = W("output.weight");
    output_norm_ = V("output_norm.weight");
    if (const GgufTensor* t = f.tensor("rope_freqs.weight")) {
      rope_freqs_.resize(size_t(cfg_.n_rot / 2));
      if (t->n_elements() != cfg_.n_rot / 2 || !quant::dequantize(t->type, t->data, rope_freqs_.data(), cfg_.n_rot / 2))
        fail("{}: tensor 'rope_freqs.weight' has the wrong size or format", f.path());
    }
    for (int64_t l = 0; l < cfg_.n_layer; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      DevLayer L;
      if ((L.fused_qkv = mats.count(b + "attn_qkv") != 0)) {
        L.wq = W(b + "attn_qkv");
        L.bq = V(b + "attn_qkv.bias");
      } else {
        L.wq = W(b + "attn_q.weight"), L.wk = W(b + "attn_k.weight"), L.wv = W(b + "attn_v.weight");
        L.bq = V(b + "attn_q.bias"), L.bk = V(b + "attn_k.bias"), L.bv = V(b + "attn_v.bias");
      }
      if ((L.fused_ffn = mats.count(b + "ffn_gate_up") != 0))
        L.gate = W(b + "ffn_gate_up");
      else
        L.gate = W(b + "ffn_gate.weight"), L.up = W(b + "ffn_up.weight");
      L.wo = W(b + "attn_output.weight"), L.down = W(b + "ffn_down.weight");
      L.attn_norm = V(b + "attn_norm.weight"), L.ffn_norm = V(b + "ffn_norm.weight");
      L.bo = V(b + "attn_output.bias");
      layers_.push_back(L);
      for (const DevWeight* m : L.matrices()) prompt_f16_ = prompt_f16_ || cuda::gemv_prompt_takes(*m);
    }
    prompt_f16_ = prompt_f16_ || cuda::gemv_prompt_takes(output_);
    build_prompt_images();
  } catch (...) {
    release_device();
    throw;
  }
}

std::string LlamaCudaModel::memory_note() const {
  if (images_)
    return fmt::format("prompt images: {:.2f} GiB of fp16 weights for prompt products",
                       double(image_want_) / double(1ull << 30));
  return image_why_.empty() ? std::string() : images_none_note(image_want_, image_why_);
}

void LlamaCudaModel::build_prompt_images() {
  std::vector<DevWeight*> ms;
  std::vector<std::pair<DevLayer*, size_t>> stacks;  // layers whose separate Q, K and V take one stacked image
  for (auto& L : layers_) {
    const size_t n = L.fused_qkv || L.bq || L.bk || L.bv ? 0 : cuda::prompt_image_stack_bytes({&L.wq, &L.wk, &L.wv});
    const bool stack = n > 0;
    if (stack) stacks.push_back({&L, n}), image_want_ += align_up(n);
    for (DevWeight* m : L.matrices())
      if (m->q && cuda::prompt_image_bytes(*m) > 0 && !(stack && (m == &L.wq || m == &L.wk || m == &L.wv)))
        ms.push_back(m), image_want_ += align_up(cuda::prompt_image_bytes(*m));
  }
  const int mode = cuda::prompt_image_mode();
  if (image_want_ == 0) return;
  const cuda::DeviceInfo dev = cuda::device_info(0);
  const ImageRule rule = image_rule(image_want_, dev.free_bytes, mode);
  if (rule.refuse) fail("{}: {} ({})", file_->path(), rule.why, dev.name);
  if (!rule.build) {
    image_why_ = rule.why;
    return;
  }
  images_asked_ = mode == 1;
  try {
    images_ = cuda::device_alloc(image_want_);
  } catch (const std::exception& e) {
    if (mode == 1) throw;
    image_why_ = fmt::format("their allocation failed ({})", e.what());
    return;
  }
  auto* at = static_cast<uint8_t*>(images_);
  for (auto [L, n] : stacks) {
    L->qkv = cuda::prompt_image_stack({&L->wq, &L->wk, &L->wv}, at);
    at += align_up(n);
  }
  for (DevWeight* m : ms) {
    const size_t n = cuda::prompt_image_bytes(*m);
    cuda::prompt_image_build(*m, at);
    at += align_up(n);
  }
  cuda::synchronize();
}

int64_t LlamaCudaModel::stacked_qkv_layers() const {
  return std::count_if(layers_.begin(), layers_.end(), [](const DevLayer& L) { return L.qkv.f16w != nullptr; });
}

std::string LlamaCudaModel::image_hint() const {
  if (!images_ || !images_asked_) return {};  // unasked ones were already given back where that would have helped
  return fmt::format(", or TF_CUDA_PROMPT_IMAGE=0 (prompt images hold {:.2f} GiB)",
                     double(image_want_) / double(1ull << 30));
}

bool LlamaCudaModel::drop_prompt_images(const char* for_what) {
  if (!images_ || images_asked_) return false;
  cuda::stream_sync();
  for (auto& L : layers_) {
    for (DevWeight* m : L.matrices()) m->f16w = nullptr;
    L.qkv = {};
  }
  cuda::device_free(images_);
  images_ = nullptr;
  image_why_ = fmt::format("given back for {}", for_what);
  return true;
}

void LlamaCudaModel::drop_graphs() {
  cuda::stream_sync();
  for (auto& [key, g] : graphs_) cuda::graph_destroy(g);
  graphs_.clear();
}

LlamaCudaModel::~LlamaCudaModel() { release_device(); }

void LlamaCudaModel::release_device() noexcept {
  for (auto& [key, g] : graphs_) cuda::graph_destroy(g);
  graphs_.clear();
  if (staging_host_) cuda::host_free_pinned(staging_host_);
  staging_host_ = nullptr;
  for (void* p : {weights_, images_, static_cast<void*>(kv_), scratch_, staging_dev_, static_cast<void*>(att_part_)}) {
    try {  // after a sticky device error every free fails; this must not throw
      if (p) cuda::device_free(p);
    } catch (...) {
    }
  }
  weights_ = images_ = scratch_ = staging_dev_ = nullptr;
  kv_ = nullptr;
  att_part_ = nullptr, prompt_keys_ = nullptr;
}

int64_t LlamaCudaModel::partial_floats(DevWeight DevLayer::*m, int64_t rows) const {
  int64_t n = 0;
  for (const DevLayer& L : layers_)
    n = std::max(n, cuda::gemv_partial_floats(L.*m, std::min(rows, cuda::gemv_split_rows())));
  return n;
}

size_t LlamaCudaModel::product_scratch(int64_t rows) const {
  size_t need = 0;
  for (int64_t r : {rows, std::min(rows, cuda::gemv_split_rows())}) {
    need = std::max(need, cuda::gemv_scratch_bytes(output_, r));
    for (const DevLayer& L : layers_)
      for (const DevWeight* m : L.matrices()) need = std::max(need, cuda::gemv_scratch_bytes(*m, r));
  }
  return need;
}

// Chunk-parallel attention's partials, then (256-aligned) the converted prompt keys.
size_t LlamaCudaModel::att_part_bytes(int64_t n_pages, int64_t page_size) const {
  const auto& c = cfg_;
  // Chunk-parallel attention's partials: no sequence holds more keys than the pool (or the CUDA context limit).
  const int64_t keys = std::min<int64_t>(kCudaMaxContext, n_pages * page_size);
  const size_t part = cuda::attention_mma_supports(c.head_dim_k, c.n_head, c.n_head_kv)
                          ? cuda::attention_chunk_bytes(kAttnChunkRows, c.n_head, c.head_dim_k, keys)
                          : 0;
  const int64_t slots = prompt_key_slots(n_pages, page_size);
  return slots ? (part + 255) / 256 * 256 + cuda::attention_prompt_keys_bytes(slots, c.n_head_kv, c.head_dim_k) : part;
}

// One sequence of the longest context a round can hold; rounds whose keys take more slots convert in each block.
int64_t LlamaCudaModel::prompt_key_slots(int64_t n_pages, int64_t page_size) const {
  const auto& c = cfg_;
  if (!prompt_f16_ || !cuda::attention_prompt_supports(c.head_dim_k, c.n_head, c.n_head_kv)) return 0;
  return (std::min<int64_t>(kCudaMaxContext, n_pages * page_size) + 63) / 64 * 64;  // whole tile pairs
}

size_t LlamaCudaModel::kv_bytes(int64_t n_pages, int64_t page_size) const {
  return size_t(n_pages * page_size * kv_floats_per_token()) * sizeof(float);
}

size_t LlamaCudaModel::kv_pool_bytes(int64_t n_pages, int64_t page_size) const {
  return kv_bytes(n_pages, page_size) + att_part_bytes(n_pages, page_size);
}

void LlamaCudaModel::bind_kv(int64_t n_pages, int64_t page_size) {
  const auto& c = cfg_;
  if (cuda::attention_mma_supports(c.head_dim_k, c.n_head, c.n_head_kv) && page_size % 16 != 0)
    fail("KV pages of {} tokens: the CUDA tensor-core attention takes pages of a multiple of 16 tokens", page_size);
  // Few-row products' partials, reserved before the pool takes the memory.
  cuda::reserve_gemv_scratch(product_scratch(cuda::gemv_split_rows()));
  const size_t bytes = kv_bytes(n_pages, page_size), old = kv_bytes(kv_pages_, page_size_);
  const int64_t att_keys = std::min<int64_t>(kCudaMaxContext, n_pages * page_size);
  const size_t att_bytes = att_part_bytes(n_pages, page_size);
  cuda::DeviceInfo dev = cuda::device_info(0);
  dev.free_bytes += (kv_ ? old : 0) + att_part_bytes_;  // the old pool and partials go first
  const size_t need = bytes + att_bytes + (size_t(1) << 28);
  if (need > dev.free_bytes && need <= dev.free_bytes + (images_ ? image_want_ : 0) &&
      drop_prompt_images("the KV pool"))
    dev.free_bytes += image_want_;
  if (need > dev.free_bytes)
    fail(
        "the KV pool ({} pages of {} tokens) and its attention partials need {:.2f} GiB of device memory but {:.2f} "
        "GiB is free; lower --parallel, --context or --prompt-cache-gib{}",
        n_pages, page_size, double(bytes + att_bytes) / double(1ull << 30), double(dev.free_bytes) / double(1ull << 30),
        image_hint());
  drop_graphs();  // graphs hold the old pool's address
  if (kv_) cuda::device_free(kv_);
  kv_ = nullptr, kv_pages_ = 0;  // no pool until the new one exists, so a failed allocation leaves nothing dangling
  if (att_part_) cuda::device_free(att_part_);
  att_part_ = nullptr, att_part_bytes_ = 0, att_keys_ = 0, prompt_keys_ = nullptr, prompt_slots_ = 0;
  auto alloc = [&](size_t n) {  // what the check allowed may still fail (fragmentation): images go first then too
    try {
      return cuda::device_alloc(n);
    } catch (const std::exception&) {
      if (!drop_prompt_images("the KV pool")) throw;
      return cuda::device_alloc(n);
    }
  };
  if (att_bytes) {
    att_part_ = static_cast<float*>(alloc(att_bytes));
    att_part_bytes_ = att_bytes, att_keys_ = att_keys;
    if (const int64_t slots = prompt_key_slots(n_pages, page_size)) {
      const size_t keys_bytes = cuda::attention_prompt_keys_bytes(slots, cfg_.n_head_kv, cfg_.head_dim_k);
      prompt_keys_ = reinterpret_cast<char*>(att_part_) + (att_bytes - keys_bytes);
      prompt_slots_ = slots;
    }
  }
  kv_ = static_cast<float*>(alloc(bytes));
  kv_pages_ = n_pages;
  page_size_ = page_size;
}

int64_t cuda_table_width(int64_t max_pages, int64_t page_size) {
  int64_t width = 4;  // a power of two of pages, so a graph per width serves sequences of many lengths
  while (width < max_pages) width *= 2;
  return std::min(width, kCudaMaxContext / page_size);
}

void LlamaCudaModel::reserve_rounds(int64_t max_rows, int64_t max_logit_rows, int64_t max_positions) {
  if (max_rows > kCudaMaxRows)
    fail("rounds of up to {} rows exceed the {} rows a CUDA forward takes; lower --parallel, --chunk or --draft-max",
         max_rows, kCudaMaxRows);
  if (!kv_) fail("reserve_rounds needs the KV pool bound first");
  const int64_t logit_rows = std::min(max_rows, max_logit_rows);
  const int64_t pages = (max_positions + page_size_ - 1) / page_size_;
  try {
    ensure_capacity(max_rows, logit_rows, max_rows * cuda_table_width(pages, page_size_));
  } catch (const std::exception& e) {
    fail(
        "rounds of up to {} rows ({} with logits) need device scratch beside the KV pool that could not be had ({}); "
        "lower --parallel, --chunk, --context or --prompt-cache-gib{}",
        max_rows, logit_rows, e.what(), image_hint());
  }
}

void LlamaCudaModel::ensure_capacity(int64_t n_rows, int64_t n_logit_rows, int64_t table_ints) {
  if (n_rows <= cap_rows_ && n_logit_rows <= cap_logits_ && table_ints <= cap_table_) return;
  drop_graphs();  // graphs hold the old buffers' addresses
  auto grow = [](int64_t need, int64_t cap, int64_t least) {
    return need <= cap && cap > 0 ? cap : std::max(need, std::max(least, cap * 2));
  };
  const int64_t rows = std::min(grow(n_rows, cap_rows_, 16), std::max(n_rows, kCudaMaxRows));
  const int64_t table = grow(table_ints, cap_table_, 256);
  const int64_t LR = std::min(rows, grow(n_logit_rows, cap_logits_, 16));  // logits and candidates: those rows only
  const auto& c = cfg_;
  const int64_t R = rows, E = c.n_embd, Dq = c.n_head * c.head_dim_k, F = c.n_ff;
  const int64_t sizes[] = {R * E,
                           R * std::max(E, F),
                           R * (Dq + 2 * kv_row_),
                           R * kv_row_,
                           R * kv_row_,
                           R * Dq,
                           R * E,
                           R * 2 * F,
                           R * F,
                           LR * c.n_vocab,
                           R * std::max({E, F, Dq}),
                           R * std::max({E, F, Dq}) / 32,
                           partial_floats(&DevLayer::wk, R),
                           partial_floats(&DevLayer::wv, R)};
  size_t total = 0;
  for (int64_t s : sizes) total += align_up(size_t(s) * 4);
  total +=
      align_up(size_t(LR) * sizeof(cuda::RowCandidatesDev)) + align_up(cuda::candidates_scratch_bytes(LR, c.n_vocab));
  const size_t staging = align_up(size_t(6 * R + table) * 4) + align_up(size_t(R * c.n_rot) * 4) +
                         align_up(size_t(R) * sizeof(cuda::SampleRow));
  // The new buffers first: if one cannot be had, the old ones (and the old capacity) stay as they were.
  void *scratch = nullptr, *dev = nullptr, *host = nullptr;
  for (bool retry = true;; retry = false) {
    bool device = true;  // only device memory is worth the images
    try {
      cuda::reserve_gemv_scratch(product_scratch(R));  // before committing, so no graph capture ever needs to grow it
      scratch = cuda::device_alloc(total);
      dev = cuda::device_alloc(staging);
      device = false;
      host = cuda::host_alloc_pinned(staging);
      break;
    } catch (...) {
      if (scratch) cuda::device_free(scratch);
      if (dev) cuda::device_free(dev);
      scratch = dev = nullptr;
      if (!retry || !device || !drop_prompt_images("the round scratch")) throw;
    }
  }
  if (scratch_) cuda::device_free(scratch_);
  if (staging_dev_) cuda::device_free(staging_dev_);
  if (staging_host_) cuda::host_free_pinned(staging_host_);
  scratch_ = scratch, staging_dev_ = dev, staging_host_ = host, staging_bytes_ = staging;
  cap_rows_ = rows, cap_logits_ = LR, cap_table_ = table;
  float** bufs[] = {&x_, &h_, &q_, &k_, &v_, &att_, &o_, &g_, &u_, &logits_, &xs_, &xsum_, &kpart_, &vpart_};
  size_t off = 0;
  for (size_t i = 0; i < std::size(bufs); ++i) {
    *bufs[i] = reinterpret_cast<float*>(static_cast<char*>(scratch_) + off);
    off += align_up(size_t(sizes[i]) * 4);
  }
  cand_ = static_cast<char*>(scratch_) + off;
  cand_scratch_ = static_cast<char*>(cand_) + align_up(size_t(LR) * sizeof(cuda::RowCandidatesDev));
}

}  // namespace tf
