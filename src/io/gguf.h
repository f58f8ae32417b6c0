#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mapped_file.h"
#include "io/ggml_types.h"

namespace tf {

enum class GgufValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9, U64 = 10, I64 = 11,
  F64 = 12,
};

// One metadata value; an array keeps its elements in the vector matching its element kind.
struct GgufValue {
  GgufValueType type = GgufValueType::U8;
  GgufValueType elem_type = GgufValueType::U8;  // arrays only
  int64_t i = 0;                                // integer and bool scalars (u64 above 2^63 refused)
  double f = 0;                                 // float scalars
  std::string s;                                // string scalar
  std::vector<int64_t> ints;                    // integer and bool arrays
  std::vector<double> floats;                   // float arrays
  std::vector<std::string> strings;             // string arrays
  bool is_int() const;
  bool is_float() const { return type == GgufValueType::F32 || type == GgufValueType::F64; }
};

struct GgufTensor {
  std::string name;
  std::vector<int64_t> ne;  // ne[0] is the contiguous dimension
  GgmlType type;
  uint64_t offset = 0;      // relative to the data section
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  int64_t n_elements() const;
};

// A validated, memory-mapped GGUF file: every header field, type, alignment and offset is checked on open.
class GgufFile {
 public:
  explicit GgufFile(const std::string& path);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::string& path() const { return file_.path(); }
  uint64_t file_size() const { return file_.size(); }

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  // Typed reads: absent gives nullopt, a stored value of the wrong kind is an error naming the key.
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  const std::vector<std::string>* get_strings(std::string_view key) const;
  const std::vector<int64_t>* get_ints(std::string_view key) const;
  const std::vector<double>* get_floats(std::string_view key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* tensor(std::string_view name) const;

 private:
  void parse();

  MappedFile file_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace tf
