#pragma once
#include <string>
#include <vector>

#include "engine/loaded_model.h"

namespace tf::cli {

struct DeviceBenchOptions {
  std::string model;
  std::vector<int64_t> pp{512};
  int64_t tg = 128, ubatch = 512, reps = 5;  // reps: timed prefills of each prompt length
  std::vector<int> streams;
  std::vector<int64_t> depths;  // decode again after this many prompt tokens
};

// Device benchmark: prefill tok/s and TFLOP/s, decode tok/s against the copy-bandwidth floor with the graph/kernel
// split, and engine aggregate decode over several stream counts.
int run_device_bench(LoadedModel& lm, const DeviceBenchOptions& o);

}  // namespace tf::cli
