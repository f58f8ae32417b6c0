#pragma once
#include <string>

namespace tf {

// Which backend runs a model: `--backend auto|cpu|cuda`.
struct BackendChoice {
  std::string name;    // "cpu" or "cuda"
  std::string detail;  // the device and its memory, or why CUDA was not taken
  size_t device_free_bytes = 0, device_total_bytes = 0;
};

bool cuda_compiled();
// "auto" takes CUDA when a device of compute capability >= 9.0 is present; "cuda" fails naming what is missing.
BackendChoice choose_backend(const std::string& want);
// Device-to-device copy rate of GPU 0 in bytes per second, counting bytes read plus written (0 without CUDA).
double device_copy_bandwidth();

}  // namespace tf
