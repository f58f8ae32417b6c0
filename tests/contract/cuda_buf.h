#pragma once
// A device copy of a host vector for the CUDA contract checks, freed with the object.
#include <cstddef>
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

// Raw device memory freed with the object; never copied (keep several in a deque), so freed once.
struct Mem {
  void* p;
  explicit Mem(size_t n) : p(cuda::device_alloc(n)) {}
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;
  ~Mem() { cuda::device_free(p); }
  float* f() const { return static_cast<float*>(p); }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

inline std::vector<float> to_host(const void* p, size_t n) {
  std::vector<float> h(n);
  cuda::copy_to_host(h.data(), p, n * 4);
  return h;
}

}  // namespace tf::contract
