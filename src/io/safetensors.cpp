#include "io/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "base/error.h"
#include "base/log.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr uint64_t kMaxHeader = 100ull << 20;  // the format's own limit

struct DtypeInfo {
  StDtype t;
  const char* name;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {StDtype::BOOL, "BOOL", 1}, {StDtype::U8, "U8", 1},           {StDtype::I8, "I8", 1},
    {StDtype::F8_E4M3, "F8_E4M3", 1}, {StDtype::F8_E5M2, "F8_E5M2", 1}, {StDtype::F8_E8M0, "F8_E8M0", 1},
    {StDtype::I16, "I16", 2},   {StDtype::U16, "U16", 2},         {StDtype::F16, "F16", 2},
    {StDtype::BF16, "BF16", 2}, {StDtype::I32, "I32", 4},         {StDtype::U32, "U32", 4},
    {StDtype::F32, "F32", 4},   {StDtype::I64, "I64", 8},         {StDtype::U64, "U64", 8},
    {StDtype::F64, "F64", 8},
};

bool parse_dtype(const std::string& s, StDtype& out) {
  for (const auto& d : kDtypes)
    if (s == d.name) return out = d.t, true;
  return false;
}

// A non-negative integer from the header, or an error naming the tensor and the field.
uint64_t header_uint(const json& v, const std::string& path, const std::string& name, const char* field) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return uint64_t(v.get<int64_t>());
  fail("{}: tensor '{}': {} must hold non-negative integers, found {}", path, name, field, v.dump());
}

}  // namespace

const char* st_dtype_name(StDtype t) {
  for (const auto& d : kDtypes)
    if (d.t == t) return d.name;
  return "?";
}

size_t st_dtype_size(StDtype t) {
  for (const auto& d : kDtypes)
    if (d.t == t) return d.size;
  return 0;
}

int64_t StTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path, int shard) : file_(path) {
  const uint64_t size = file_.size();
  if (size < 8) fail("{}: not a safetensors file: {} bytes, shorter than the 8-byte header length", path, size);
  uint64_t n = 0;
  std::memcpy(&n, file_.data(), 8);
  if (n > kMaxHeader) fail("{}: header length {} is over the format's limit of {} bytes", path, n, kMaxHeader);
  if (n > size - 8) fail("{}: header length {} runs past the end of the file ({} bytes)", path, n, size);
  header_bytes_ = n;
  const char* text = reinterpret_cast<const char*>(file_.data() + 8);
  if (n == 0 || text[0] != '{') fail("{}: the header is not a JSON object", path);
  json h;
  try {
    h = json::parse(text, text + n);
  } catch (const json::parse_error& e) {
    fail("{}: the header is not valid JSON: {}", path, e.what());
  }
  if (!h.is_object()) fail("{}: the header is not a JSON object", path);
  const uint64_t data_size = size - 8 - n;
  const uint8_t* data = file_.data() + 8 + n;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("{}: __metadata__ must be an object of strings", path);
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail("{}: __metadata__ '{}' must be a string", path, m.key());
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) fail("{}: tensor '{}': its entry must be an object", path, name);
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!v.contains(field)) fail("{}: tensor '{}': missing '{}'", path, name, field);
    StTensor t;
    t.name = name;
    t.shard = shard;
    if (!v["dtype"].is_string() || !parse_dtype(v["dtype"].get<std::string>(), t.dtype))
      fail("{}: tensor '{}': unknown dtype {}", path, name, v["dtype"].dump());
    if (!v["shape"].is_array()) fail("{}: tensor '{}': shape must be an array", path, name);
    uint64_t count = 1;
    for (const json& d : v["shape"]) {
      const uint64_t dim = header_uint(d, path, name, "shape");
      if (dim > (uint64_t(1) << 48) || (dim && count > (uint64_t(1) << 62) / dim))
        fail("{}: tensor '{}': shape {} is too large", path, name, v["shape"].dump());
      count *= dim;
      t.shape.push_back(int64_t(dim));
    }
    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2) fail("{}: tensor '{}': data_offsets must be [begin, end]", path, name);
    const uint64_t b = header_uint(off[0], path, name, "data_offsets"),
                   e = header_uint(off[1], path, name, "data_offsets");
    if (b > e) fail("{}: tensor '{}': data_offsets [{}, {}] end before they begin", path, name, b, e);
    if (e > data_size)
      fail("{}: tensor '{}': data_offsets [{}, {}] run past the data section ({} bytes)", path, name, b, e, data_size);
    if (count > UINT64_MAX / st_dtype_size(t.dtype))
      fail("{}: tensor '{}': shape {} is too large", path, name, v["shape"].dump());
    const uint64_t want = count * st_dtype_size(t.dtype);
    if (e - b != want)
      fail("{}: tensor '{}': {} x {} needs {} bytes but data_offsets [{}, {}] hold {}", path, name,
           st_dtype_name(t.dtype), v["shape"].dump(), want, b, e, e - b);
    t.begin = b, t.nbytes = e - b, t.data = data + b;
    tensors_.push_back(std::move(t));
  }
  // The data section must be covered exactly once, in offset order: no overlap, no hole, nothing after the end.
  std::vector<const StTensor*> by_off;
  for (const auto& t : tensors_) by_off.push_back(&t);
  std::sort(by_off.begin(), by_off.end(), [](const StTensor* a, const StTensor* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->nbytes < b->nbytes;
  });
  uint64_t at = 0;
  const StTensor* prev = nullptr;
  for (const StTensor* t : by_off) {
    if (t->begin < at)
      fail("{}: tensor '{}' (bytes {}..{}) overlaps tensor '{}' (bytes {}..{})", path, t->name, t->begin,
           t->begin + t->nbytes, prev->name, prev->begin, prev->begin + prev->nbytes);
    if (t->begin > at)
      fail("{}: bytes {}..{} of the data section belong to no tensor (before '{}')", path, at, t->begin, t->name);
    at = t->begin + t->nbytes;
    prev = t;
  }
  if (at != data_size) fail("{}: bytes {}..{} of the data section belong to no tensor", path, at, data_size);
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

const StTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

bool is_safetensors_checkpoint(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return fs::exists(fs::path(path) / "model.safetensors.index.json", ec) ||
           fs::exists(fs::path(path) / "model.safetensors", ec);
  return path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0;
}

void SafetensorsCheckpoint::add_whole(const std::string& path) {
  add_shard(path);
  for (const auto& t : shards_[0]->tensors()) order_.push_back(&t), by_name_[t.name] = &t;
}

void SafetensorsCheckpoint::add_shard(const std::string& path) {
  shards_.push_back(std::make_unique<SafetensorsFile>(path, int(shards_.size())));
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (!fs::is_directory(p, ec)) {
    folder_ = p.parent_path().string();
    add_whole(path);
    return;
  }
  folder_ = path;
  const fs::path index = p / "model.safetensors.index.json";
  if (!fs::exists(index, ec)) {
    if (!fs::exists(p / "model.safetensors", ec))
      fail("{}: no model.safetensors.index.json and no model.safetensors in this folder", path);
    add_whole((p / "model.safetensors").string());
    return;
  }
  json j;
  {
    std::ifstream in(index);
    if (!in) fail("{}: cannot read", index.string());
    try {
      j = json::parse(in);
    } catch (const json::parse_error& e) {
      fail("{}: not valid JSON: {}", index.string(), e.what());
    }
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail("{}: needs a 'weight_map' object of tensor name -> shard file", index.string());
  std::map<std::string, int> shard_of_file;
  std::vector<std::pair<std::string, std::string>> entries;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string()) fail("{}: weight_map '{}' must name a file", index.string(), it.key());
    const std::string file = it.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file.find('\\') != std::string::npos || file == "..")
      fail("{}: weight_map '{}' names '{}', which is not a file in this folder", index.string(), it.key(), file);
    entries.emplace_back(it.key(), file);
    shard_of_file.emplace(file, -1);
  }
  for (auto& [file, id] : shard_of_file) {
    const fs::path sp = p / file;
    if (!fs::exists(sp, ec)) fail("{}: shard '{}' named in the index is missing", path, file);
    add_shard(sp.string());
    id = int(shards_.size()) - 1;
  }
  std::set<std::string> indexed;
  for (const auto& [name, file] : entries) {
    const SafetensorsFile& sh = *shards_[size_t(shard_of_file[file])];
    const StTensor* t = sh.find(name);
    if (!t) fail("{}: tensor '{}' is named in the index under '{}', which does not hold it", path, name, file);
    order_.push_back(t);
    by_name_[name] = t;
    indexed.insert(name);
  }
  for (const auto& sh : shards_)
    for (const auto& t : sh->tensors())
      if (!indexed.count(t.name) || by_name_[t.name] != &t)
        fail("{}: tensor '{}' in shard '{}' is not in the index under that shard", path, t.name,
             fs::path(sh->path()).filename().string());
  if (j.contains("metadata") && j["metadata"].is_object() && j["metadata"].contains("total_size") &&
      j["metadata"]["total_size"].is_number_unsigned() && j["metadata"]["total_size"].get<uint64_t>() != data_bytes())
    log::warn("{}: the index's total_size {} differs from the shards' tensor bytes {}", index.string(),
                j["metadata"]["total_size"].get<uint64_t>(), data_bytes());
}

const StTensor* SafetensorsCheckpoint::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : it->second;
}

const StTensor& SafetensorsCheckpoint::get(std::string_view name) const {
  const StTensor* t = find(name);
  if (!t) fail("{}: the checkpoint has no tensor '{}'", folder_, name);
  return *t;
}

uint64_t SafetensorsCheckpoint::data_bytes() const {
  uint64_t n = 0;
  for (const StTensor* t : order_) n += t->nbytes;
  return n;
}

uint64_t SafetensorsCheckpoint::file_bytes() const {
  uint64_t n = 0;
  for (const auto& s : shards_) n += s->file_size();
  return n;
}

}  // namespace tf
