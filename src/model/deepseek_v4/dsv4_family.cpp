// The deepseek_v4 family's entry in the registry: config and checkpoint checks, and the CPU model.
#include "base/error.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/deepseek_v4/dsv4_checkpoint.h"
#include "model/deepseek_v4/dsv4_model.h"
#include "model/model.h"

namespace tf::dsv4 {
namespace {

ModelInfo inspect(const SafetensorsCheckpoint& ck, const JsonConfig& cfg) {
  return inspect_checkpoint(ck, parse_config(cfg));
}

const bool kRegistered = register_family(FamilyEntry{
    "deepseek_v4", {}, nullptr, nullptr, nullptr, nullptr, {"deepseek_v4"}, inspect, load, nullptr});

}  // namespace
}  // namespace tf::dsv4
