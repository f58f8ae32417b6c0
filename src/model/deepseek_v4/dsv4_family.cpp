// The deepseek_v4 family's entry in the registry: config and checkpoint checks, and the CPU model.
#include "backend/cpu/ops.h"
#include "base/error.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/deepseek_v4/dsv4_checkpoint.h"
#include "model/deepseek_v4/dsv4_model.h"
#include "model/model.h"

namespace tf::dsv4 {
namespace {

ModelInfo inspect(const SafetensorsCheckpoint& ck, const JsonConfig& cfg) {
  const Config c = parse_config(cfg);
  const CheckpointSummary s = check_checkpoint(ck, c);
  for (const Expected& e : expected_tensors(c))
    if (e.kind == Stored::Fp8 || e.kind == Stored::Mxfp4)
      if (auto why = cpu::scaled_matmul_refusal(scaled_weight(ck, c, e)); !why.empty()) fail("{}", why);
  ModelInfo i;
  i.family = "deepseek_v4";
  i.architecture = cfg.get_string("model_type");
  i.n_vocab = c.vocab;
  i.n_ctx_train = c.max_pos;
  i.n_layer = c.n_layer;
  i.n_embd = c.hidden;
  i.n_params = s.n_params;
  i.weight_bytes = int64_t(s.bytes);
  i.kv_bytes_per_token = slot_floats(c) * 4;  // the CPU path's per-token state (dsv4_model.h)
  i.tensors_by_format = s.formats;
  return i;
}

const bool kRegistered = register_family(FamilyEntry{
    "deepseek_v4", {}, nullptr, nullptr, nullptr, nullptr, {"deepseek_v4"}, inspect, load});

}  // namespace
}  // namespace tf::dsv4
