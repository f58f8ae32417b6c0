#include "model/deepseek_v4/dsv4_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <set>

#include "backend/cpu/ops.h"
#include "base/error.h"

namespace tf::dsv4 {
namespace {

void block_tensors(const Config& c, const std::string& p, int64_t ratio, bool hash, std::vector<Expected>& out) {
  const int64_t D = c.hidden, H = c.n_head, d = c.head_dim, qr = c.q_lora, G = c.o_groups, ol = c.o_lora;
  const int64_t E = c.n_experts, I = c.moe_inter, hc = c.hc_mult, mix = (2 + hc) * hc;
  auto add = [&](std::string n, Stored k, std::vector<int64_t> s) { out.push_back({p + n, k, std::move(s)}); };
  add("attn_norm.weight", Stored::Dense, {D});
  add("ffn_norm.weight", Stored::Dense, {D});
  for (const char* site : {"attn", "ffn"}) {
    add(fmt::format("hc_{}_fn", site), Stored::F32, {mix, hc * D});
    add(fmt::format("hc_{}_base", site), Stored::F32, {mix});
    add(fmt::format("hc_{}_scale", site), Stored::F32, {3});
  }
  add("attn.attn_sink", Stored::F32, {H});
  add("attn.q_norm.weight", Stored::Dense, {qr});
  add("attn.kv_norm.weight", Stored::Dense, {d});
  add("attn.wq_a", Stored::Fp8, {qr, D});
  add("attn.wq_b", Stored::Fp8, {H * d, qr});
  add("attn.wkv", Stored::Fp8, {d, D});
  add("attn.wo_a", Stored::Fp8, {G * ol, H * d / G});
  add("attn.wo_b", Stored::Fp8, {D, G * ol});
  if (ratio) {
    const int64_t cw = ratio == 4 ? 2 * d : d;
    add("attn.compressor.wkv.weight", Stored::Dense, {cw, D});
    add("attn.compressor.wgate.weight", Stored::Dense, {cw, D});
    add("attn.compressor.ape", Stored::F32, {ratio, cw});
    add("attn.compressor.norm.weight", Stored::Dense, {d});
  }
  if (ratio == 4) {
    const int64_t ih = c.index_heads, id = c.index_dim;
    add("attn.indexer.wq_b", Stored::Fp8, {ih * id, qr});
    add("attn.indexer.weights_proj.weight", Stored::Dense, {ih, D});
    add("attn.indexer.compressor.wkv.weight", Stored::Dense, {2 * id, D});
    add("attn.indexer.compressor.wgate.weight", Stored::Dense, {2 * id, D});
    add("attn.indexer.compressor.ape", Stored::F32, {4, 2 * id});
    add("attn.indexer.compressor.norm.weight", Stored::Dense, {id});
  }
  add("ffn.gate.weight", Stored::Dense, {E, D});
  if (hash)
    add("ffn.gate.tid2eid", Stored::I64, {c.vocab, c.top_k});
  else
    add("ffn.gate.bias", Stored::F32, {E});
  if (c.n_shared) {
    add("ffn.shared_experts.w1", Stored::Fp8, {c.n_shared * I, D});
    add("ffn.shared_experts.w3", Stored::Fp8, {c.n_shared * I, D});
    add("ffn.shared_experts.w2", Stored::Fp8, {D, c.n_shared * I});
  }
  const Stored ek = c.expert_dtype == "fp4" ? Stored::Mxfp4 : Stored::Fp8;
  for (int64_t e = 0; e < E; ++e) {
    add(fmt::format("ffn.experts.{}.w1", e), ek, {I, D});
    add(fmt::format("ffn.experts.{}.w3", e), ek, {I, D});
    add(fmt::format("ffn.experts.{}.w2", e), ek, {D, I});
  }
}

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

const StTensor& need(const SafetensorsCheckpoint& ck, const std::string& name, const std::string& what) {
  const StTensor* t = ck.find(name);
  if (!t) fail("{}: the checkpoint lacks tensor '{}' ({} expected)", ck.folder(), name, what);
  return *t;
}

void need_shape(const StTensor& t, const std::vector<int64_t>& s, const SafetensorsCheckpoint& ck) {
  if (t.shape != s)
    fail("{}: tensor '{}' is {} {}, expected {}", ck.folder(), t.name, st_dtype_name(t.dtype), shape_str(t.shape),
         shape_str(s));
}

}  // namespace

std::vector<Expected> expected_tensors(const Config& c) {
  std::vector<Expected> out;
  const int64_t D = c.hidden, V = c.vocab, hc = c.hc_mult;
  out.push_back({"embed.weight", Stored::Dense, {V, D}});
  out.push_back({"head.weight", Stored::Dense, {V, D}});
  out.push_back({"norm.weight", Stored::Dense, {D}});
  for (const std::string& pre : {std::string(), std::string("mtp.0.")}) {
    if (!pre.empty() && c.n_nextn < 1) break;
    out.push_back({pre + "hc_head_fn", Stored::F32, {hc, hc * D}});
    out.push_back({pre + "hc_head_base", Stored::F32, {hc}});
    out.push_back({pre + "hc_head_scale", Stored::F32, {1}});
  }
  for (int64_t L = 0; L < c.n_layer; ++L)
    block_tensors(c, fmt::format("layers.{}.", L), c.ratio(L), L < c.n_hash_layers, out);
  if (c.n_nextn >= 1) {
    block_tensors(c, "mtp.0.", 0, false, out);
    out.push_back({"mtp.0.e_proj", Stored::Fp8, {D, D}});
    out.push_back({"mtp.0.h_proj", Stored::Fp8, {D, D}});
    for (const char* n : {"enorm", "hnorm", "norm"})
      out.push_back({fmt::format("mtp.0.{}.weight", n), Stored::Dense, {D}});
  }
  return out;
}

quant::ScaledWeight scaled_weight(const SafetensorsCheckpoint& ck, const Config& c, const Expected& e) {
  const int64_t out = e.shape[0], in = e.shape[1];
  const std::string wn = e.name + ".weight", sn = e.name + ".scale";
  quant::ScaledWeight w;
  w.name = wn, w.n_out = out, w.n_in = in;
  if (e.kind == Stored::Mxfp4) {
    const StTensor& q = need(ck, wn, fmt::format("I8 [{}, {}] of E2M1 pairs", out, in / 2));
    if (q.dtype != StDtype::I8 && q.dtype != StDtype::U8)
      fail("{}: tensor '{}' is {}; MXFP4 experts are stored as I8 (expert_dtype fp4)", ck.folder(), wn,
           st_dtype_name(q.dtype));
    if (in % 32) fail("{}: tensor '{}': {} columns are not whole 32-element MXFP4 groups", ck.folder(), wn, in);
    need_shape(q, {out, in / 2}, ck);
    const StTensor& s = need(ck, sn, fmt::format("F8_E8M0 [{}, {}]", out, in / 32));
    if (s.dtype != StDtype::F8_E8M0)
      fail("{}: tensor '{}' is {}; MXFP4 scales must be F8_E8M0", ck.folder(), sn, st_dtype_name(s.dtype));
    need_shape(s, {out, in / 32}, ck);
    w.kind = quant::ScaledKind::Mxfp4, w.block = 32, w.data = q.data, w.scale = s.data;
    return w;
  }
  const StTensor& q = need(ck, wn, fmt::format("F8_E4M3 [{}, {}]", out, in));
  if (q.dtype != StDtype::F8_E4M3)
    fail("{}: tensor '{}' is {}; the release stores it as F8_E4M3", ck.folder(), wn, st_dtype_name(q.dtype));
  need_shape(q, {out, in}, ck);
  const int64_t B = c.block;
  const std::vector<int64_t> grid = {(out + B - 1) / B, (in + B - 1) / B};
  const StTensor& s = need(ck, sn, fmt::format("scales {} for {}x{} blocks", shape_str(grid), B, B));
  const bool e8 = s.dtype == StDtype::F8_E8M0, f32 = s.dtype == StDtype::F32;
  if (!e8 && !f32)
    fail("{}: tensor '{}' is {}; FP8 block scales must be F8_E8M0 or F32", ck.folder(), sn, st_dtype_name(s.dtype));
  if (e8 != (c.scale_fmt == "ue8m0"))
    fail("{}: tensor '{}' is {} but quantization_config.scale_fmt is '{}'", ck.folder(), sn, st_dtype_name(s.dtype),
         c.scale_fmt.empty() ? "(absent: float32)" : c.scale_fmt);
  if (s.shape != grid)
    fail("{}: tensor '{}' is {}, expected {} (weight {} in {}x{} blocks)", ck.folder(), sn, shape_str(s.shape),
         shape_str(grid), shape_str(e.shape), B, B);
  w.kind = e8 ? quant::ScaledKind::Fp8E8M0 : quant::ScaledKind::Fp8F32, w.block = B, w.data = q.data,
  w.scale = s.data;
  return w;
}

CheckpointSummary check_checkpoint(const SafetensorsCheckpoint& ck, const Config& c) {
  CheckpointSummary sum;
  std::set<std::string> used;
  for (const Expected& e : expected_tensors(c)) {
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    sum.n_params += n;
    if (e.kind == Stored::Fp8 || e.kind == Stored::Mxfp4) {
      const quant::ScaledWeight w = scaled_weight(ck, c, e);
      sum.formats[e.kind == Stored::Mxfp4 ? "mxfp4" : w.kind == quant::ScaledKind::Fp8F32 ? "fp8_block/f32"
                                                                                          : "fp8_block/e8m0"] += 1;
      for (const char* suffix : {".weight", ".scale"}) {
        used.insert(e.name + suffix);
        sum.bytes += ck.get(e.name + suffix).nbytes;
      }
      continue;
    }
    const StTensor& t = need(ck, e.name, shape_str(e.shape));
    const bool ok = e.kind == Stored::I64   ? t.dtype == StDtype::I64
                    : e.kind == Stored::F32 ? t.dtype == StDtype::F32
                                            : t.dtype == StDtype::BF16 || t.dtype == StDtype::F32;
    if (!ok)
      fail("{}: tensor '{}' is {}, expected {}", ck.folder(), e.name, st_dtype_name(t.dtype),
           e.kind == Stored::I64 ? "I64" : e.kind == Stored::F32 ? "F32" : "BF16 or F32");
    need_shape(t, e.shape, ck);
    if (e.kind == Stored::I64)  // tid2eid: every entry an expert id
      for (int64_t i = 0; i < t.n_elements(); ++i) {
        int64_t v;
        std::memcpy(&v, t.data + 8 * i, 8);
        if (v < 0 || v >= c.n_experts)
          fail("{}: tensor '{}' names expert {} at entry {}, outside 0..{}", ck.folder(), e.name, v, i,
               c.n_experts - 1);
      }
    sum.formats[t.dtype == StDtype::BF16 ? "bf16" : t.dtype == StDtype::I64 ? "i64" : "f32"] += 1;
    used.insert(e.name);
    sum.bytes += t.nbytes;
  }
  for (const StTensor* t : ck.tensors()) sum.n_unused += used.count(t->name) ? 0 : 1;
  return sum;
}

ModelInfo inspect_checkpoint(const SafetensorsCheckpoint& ck, const Config& c) {
  const CheckpointSummary s = check_checkpoint(ck, c);
  for (const Expected& e : expected_tensors(c))
    if (e.kind == Stored::Fp8 || e.kind == Stored::Mxfp4)
      if (auto why = cpu::scaled_matmul_refusal(scaled_weight(ck, c, e)); !why.empty()) fail("{}", why);
  ModelInfo i;
  i.family = i.architecture = "deepseek_v4";
  i.n_vocab = c.vocab, i.n_ctx_train = c.max_pos, i.n_layer = c.n_layer, i.n_embd = c.hidden;
  i.n_params = s.n_params, i.weight_bytes = int64_t(s.bytes), i.tensors_by_format = s.formats;
  i.kv_bytes_per_token = slot_floats(c) * 4;  // the CPU path's per-token state (dsv4_model.h)
  return i;
}

}  // namespace tf::dsv4
