#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mapped_file.h"

namespace tf {

// The element types a safetensors header may name (the spec's full list; models use a few of them).
enum class StDtype { BOOL, U8, I8, F8_E4M3, F8_E5M2, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64 };

const char* st_dtype_name(StDtype t);
size_t st_dtype_size(StDtype t);

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::U8;
  std::vector<int64_t> shape;  // outermost first, as the file stores it
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  uint64_t begin = 0;  // byte offset in the file's data section
  int shard = 0;       // index into SafetensorsCheckpoint::shards()
  int64_t n_elements() const;
};

// One memory-mapped safetensors file: the header is checked against the file on open (JSON shape, known dtypes,
// shape x dtype = byte count, offsets inside the data section and not overlapping); data is used in place.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path, int shard = 0);

  const std::string& path() const { return file_.path(); }
  uint64_t file_size() const { return file_.size(); }
  uint64_t header_bytes() const { return header_bytes_; }
  const uint8_t* mapping() const { return file_.data(); }
  const std::vector<StTensor>& tensors() const { return tensors_; }
  const StTensor* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile file_;
  uint64_t header_bytes_ = 0;
  std::vector<StTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint: one safetensors file, or a folder with `model.safetensors` or with `model.safetensors.index.json`
// and its shards. Every name in the index must be in the shard it names, and every shard tensor in the index.
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& path);

  const std::string& folder() const { return folder_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }
  const std::vector<const StTensor*>& tensors() const { return order_; }
  const StTensor* find(std::string_view name) const;
  // The tensor, or an error naming it and the checkpoint.
  const StTensor& get(std::string_view name) const;
  uint64_t data_bytes() const;  // the tensors' bytes, all shards
  uint64_t file_bytes() const;  // the shards' sizes on disk

 private:
  void add_shard(const std::string& path);
  void add_whole(const std::string& path);  // a checkpoint that is one file

  std::string folder_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<const StTensor*> order_;
  std::unordered_map<std::string, const StTensor*> by_name_;
};

// True when `path` is a safetensors file or a folder holding a safetensors checkpoint.
bool is_safetensors_checkpoint(const std::string& path);

}  // namespace tf
