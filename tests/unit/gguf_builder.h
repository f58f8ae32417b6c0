#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

// Writes small GGUF files byte by byte, so tests can plant exactly one defect each.
struct GgufBuilder {
  std::vector<uint8_t> b;
  template <class T>
  void put(T v) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    put<uint32_t>(version);
    put<uint64_t>(n_tensors);
    put<uint64_t>(n_kv);
  }
  void kv_string(const std::string& k, const std::string& v) {
    str(k);
    put<uint32_t>(8);
    str(v);
  }
  void kv_u32(const std::string& k, uint32_t v) {
    str(k);
    put<uint32_t>(4);
    put<uint32_t>(v);
  }
  void kv_f32(const std::string& k, float v) {
    str(k);
    put<uint32_t>(6);
    put<float>(v);
  }
  void tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name);
    put<uint32_t>(uint32_t(ne.size()));
    for (auto d : ne) put<uint64_t>(d);
    put<uint32_t>(type);
    put<uint64_t>(offset);
  }
  void align(size_t a = 32) {
    while (b.size() % a) b.push_back(0);
  }
  void data(size_t n, uint8_t fill = 0) { b.insert(b.end(), n, fill); }
  std::string write(const std::string& name) const {
    std::string path = std::string(::testing::TempDir()) + name;
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(b.data(), 1, b.size(), f);
    std::fclose(f);
    return path;
  }
};
