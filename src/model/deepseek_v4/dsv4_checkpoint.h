#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/deepseek_v4/dsv4_config.h"
#include "model/model.h"
#include "quant/scaled/scaled.h"

namespace tf::dsv4 {

// How the release stores a tensor: plain (BF16 or F32 matrices and norms), F32 only, I64, or a weight with its
// scale tensor (FP8 blocks; MXFP4 experts).
enum class Stored { Dense, F32, I64, Fp8, Mxfp4 };

struct Expected {
  std::string name;            // without ".weight" / ".scale" for Fp8 and Mxfp4
  Stored kind = Stored::Dense;
  std::vector<int64_t> shape;  // logical [out, in] for Fp8 and Mxfp4
};

// Every tensor the config implies, in the release's naming (layers.N., mtp.0., globals).
std::vector<Expected> expected_tensors(const Config& c);

struct CheckpointSummary {
  int64_t n_params = 0;         // logical weights (scales not counted)
  uint64_t bytes = 0;           // bytes of the tensors the model reads (weights and scales)
  int64_t n_unused = 0;         // tensors in the files the model does not read
  std::map<std::string, int64_t> formats;  // format -> tensor count
};

// Checks every expected tensor against the checkpoint (present, dtype, shape, scale format and grid); the first
// mismatch is an error naming the tensor and what was expected.
CheckpointSummary check_checkpoint(const SafetensorsCheckpoint& ck, const Config& c);

// Checks config and tensors (check_checkpoint, and every FP8/MXFP4 weight against the CPU kernels) and describes
// the model as the engine sees it.
ModelInfo inspect_checkpoint(const SafetensorsCheckpoint& ck, const Config& c);

// A checked Fp8 or Mxfp4 weight as the kernels read it.
quant::ScaledWeight scaled_weight(const SafetensorsCheckpoint& ck, const Config& c, const Expected& e);

}  // namespace tf::dsv4
