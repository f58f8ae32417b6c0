#pragma once
// A device copy of a host vector for the CUDA contract checks, freed with the object.
#include <vector>

#include "backend/cuda/cuda_gemv.h"

namespace tf::contract {

template <class T>
struct Buf {
  T* p = nullptr;
  size_t n = 0;
  explicit Buf(const std::vector<T>& h) : p(cuda::upload(h)), n(h.size()) {}
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() { cuda::device_free(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    cuda::copy_to_host(h.data(), p, n * sizeof(T));
    return h;
  }
};

}  // namespace tf::contract
