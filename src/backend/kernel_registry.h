#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace tf {

struct PlantedControl {
  int id;            // the TF_CTL_ON(id) site
  std::string what;  // the realistic bug it plants
};

// specs/kernel-contract.md: what a kernel promises and how the contract test holds it to that.
struct KernelRecord {
  std::string name;     // e.g. "matmul.q4_1"
  std::string backend;  // "cpu" or "cuda"
  std::vector<std::string> formats;
  std::string shapes;   // what it promises to handle
  std::string sweep;    // what the contract test runs
  std::string bound;    // error limit against the float64 reference
  std::vector<PlantedControl> controls;
};

const std::vector<KernelRecord>& kernel_records(std::string_view backend);
// The CUDA backend's records, defined with its kernels (only in builds with TF_CUDA).
const std::vector<KernelRecord>& cuda_kernel_records();
const KernelRecord* find_kernel(std::string_view backend, std::string_view name);

}  // namespace tf
