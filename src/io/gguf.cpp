#include "io/gguf.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace tf {
namespace {

constexpr uint64_t kMaxDims = 4;

// Bounds-checked cursor over the mapped header; every read names what it was reading.
class Cursor {
 public:
  Cursor(const uint8_t* p, uint64_t size, const std::string& path) : p_(p), size_(size), path_(path) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  void need(uint64_t n, std::string_view what) {
    if (n > left())
      fail("{}: truncated file: {} at byte {} needs {} bytes but only {} remain", path_, what, pos_, n, left());
  }
  template <class T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(std::string_view what) {
    uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
};

uint64_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::BOOL: return 1;
    case GgufValueType::U16: case GgufValueType::I16: return 2;
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
    case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::F64: return 8;
    default: return 0;
  }
}

bool valid_type(uint32_t t) { return t <= uint32_t(GgufValueType::F64); }

// Reads one scalar into the integer or float slot of `v`.
void read_scalar(Cursor& c, GgufValueType t, const std::string& key, int64_t& i, double& f, const std::string& path) {
  switch (t) {
    case GgufValueType::U8: i = c.read<uint8_t>(key); break;
    case GgufValueType::I8: i = c.read<int8_t>(key); break;
    case GgufValueType::U16: i = c.read<uint16_t>(key); break;
    case GgufValueType::I16: i = c.read<int16_t>(key); break;
    case GgufValueType::U32: i = c.read<uint32_t>(key); break;
    case GgufValueType::I32: i = c.read<int32_t>(key); break;
    case GgufValueType::I64: i = c.read<int64_t>(key); break;
    case GgufValueType::U64: {
      uint64_t u = c.read<uint64_t>(key);
      if (u > uint64_t(INT64_MAX)) fail("{}: metadata '{}' holds a u64 too large to use ({})", path, key, u);
      i = int64_t(u);
      break;
    }
    case GgufValueType::BOOL: {
      uint8_t b = c.read<uint8_t>(key);
      if (b > 1) fail("{}: metadata '{}' is a bool with invalid byte {}", path, key, b);
      i = b;
      break;
    }
    case GgufValueType::F32: f = c.read<float>(key); break;
    case GgufValueType::F64: f = c.read<double>(key); break;
    default: fail("{}: metadata '{}' has unreadable scalar type {}", path, key, uint32_t(t));
  }
}

}  // namespace

bool GgufValue::is_int() const {
  return type != GgufValueType::F32 && type != GgufValueType::F64 && type != GgufValueType::STRING &&
         type != GgufValueType::ARRAY;
}

int64_t GgufTensor::n_elements() const {
  int64_t n = 1;
  for (auto d : ne) n *= d;
  return n;
}

GgufFile::GgufFile(const std::string& path) : file_(path) { parse(); }

void GgufFile::parse() {
  const std::string& path = file_.path();
  Cursor c(file_.data(), file_.size(), path);
  c.need(4, "magic");
  if (std::memcmp(file_.data(), "GGUF", 4) != 0) {
    if (file_.size() >= 4 && std::memcmp(file_.data(), "FUGG", 4) == 0) fail("{}: big-endian GGUF is not supported", path);
    fail("{}: bad magic: not a GGUF file (first bytes are not 'GGUF')", path);
  }
  c.read<uint32_t>("magic");
  version_ = c.read<uint32_t>("version");
  if ((version_ & 0xFFFF) == 0) fail("{}: version field {:#x} looks byte-swapped (big-endian file)", path, version_);
  if (version_ != 2 && version_ != 3) fail("{}: unsupported GGUF version {} (2 and 3 are supported)", path, version_);
  uint64_t n_tensors = c.read<uint64_t>("tensor_count");
  uint64_t n_kv = c.read<uint64_t>("kv_count");
  // Each KV record takes at least 12 bytes and each tensor record at least 28, so counts are bounded by the file.
  if (n_kv > c.left() / 12) fail("{}: truncated file: kv_count {} cannot fit in the {} bytes left", path, n_kv, c.left());
  if (n_tensors > c.left() / 28) fail("{}: truncated file: tensor_count {} cannot fit in the {} bytes left", path, n_tensors, c.left());

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.read_string(fmt::format("key of metadata record {}", k));
    if (key.empty()) fail("{}: metadata record {} has an empty key", path, k);
    if (kv_index_.count(key)) fail("{}: duplicate metadata key '{}'", path, key);
    uint32_t t = c.read<uint32_t>(key);
    if (!valid_type(t)) fail("{}: metadata '{}' has unknown value type {}", path, key, t);
    GgufValue v;
    v.type = GgufValueType(t);
    if (v.type == GgufValueType::STRING) {
      v.s = c.read_string(key);
    } else if (v.type == GgufValueType::ARRAY) {
      uint32_t et = c.read<uint32_t>(key);
      if (!valid_type(et)) fail("{}: metadata array '{}' has unknown element type {}", path, key, et);
      if (et == uint32_t(GgufValueType::ARRAY)) fail("{}: metadata '{}' is a nested array (not supported)", path, key);
      v.elem_type = GgufValueType(et);
      uint64_t n = c.read<uint64_t>(key);
      uint64_t min_elem = v.elem_type == GgufValueType::STRING ? 8 : scalar_size(v.elem_type);
      if (n > c.left() / min_elem) fail("{}: truncated file: metadata array '{}' of {} elements", path, key, n);
      if (v.elem_type == GgufValueType::STRING) {
        v.strings.reserve(n);
        for (uint64_t e = 0; e < n; ++e) v.strings.push_back(c.read_string(key));
      } else {
        for (uint64_t e = 0; e < n; ++e) {
          int64_t iv = 0;
          double fv = 0;
          read_scalar(c, v.elem_type, key, iv, fv, path);
          if (v.elem_type == GgufValueType::F32 || v.elem_type == GgufValueType::F64) v.floats.push_back(fv);
          else v.ints.push_back(iv);
        }
      }
    } else {
      read_scalar(c, v.type, key, v.i, v.f, path);
    }
    kv_index_[key] = kv_.size();
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufValueType::U32) fail("{}: general.alignment must be a u32", path);
    if (a->i == 0 || (a->i & (a->i - 1)) != 0) fail("{}: general.alignment {} is not a power of two", path, a->i);
    alignment_ = uint32_t(a->i);
  }

  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    t.name = c.read_string(fmt::format("name of tensor record {}", k));
    if (t.name.empty()) fail("{}: tensor record {} has an empty name", path, k);
    if (t.name.size() > 255) fail("{}: tensor name '{}...' is longer than 255 bytes", path, t.name.substr(0, 40));
    if (tensor_index_.count(t.name)) fail("{}: duplicate tensor name '{}'", path, t.name);
    uint32_t n_dims = c.read<uint32_t>(t.name);
    if (n_dims == 0 || n_dims > kMaxDims) fail("{}: tensor '{}' has n_dims {} (1 to 4 allowed)", path, t.name, n_dims);
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = c.read<uint64_t>(t.name);
      if (ne == 0 || ne > (uint64_t(1) << 40)) fail("{}: tensor '{}' dimension {} is {}", path, t.name, d, ne);
      if (n_el > (uint64_t(1) << 62) / ne) fail("{}: tensor '{}' has too many elements", path, t.name);
      n_el *= ne;
      t.ne.push_back(int64_t(ne));
    }
    uint32_t type = c.read<uint32_t>(t.name);
    auto info = ggml_type_info(type);
    if (!info) fail("{}: tensor '{}' has unknown type id {}", path, t.name, type);
    t.type = GgmlType(type);
    if (t.ne[0] % info->block_elems != 0)
      fail("{}: tensor '{}' of type {} has ne[0] = {}, not a multiple of its block size {}", path, t.name, info->name,
           t.ne[0], info->block_elems);
    t.nbytes = n_el / info->block_elems * info->block_bytes;
    t.offset = c.read<uint64_t>(t.name);
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }

  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (n_tensors > 0 && data_offset_ > file_.size()) fail("{}: truncated file: data section starts past the end", path);
  for (auto& t : tensors_) {
    if (t.offset % alignment_ != 0)
      fail("{}: tensor '{}' offset {} is not a multiple of the alignment {}", path, t.name, t.offset, alignment_);
    if (t.offset > file_.size() || t.nbytes > file_.size() - data_offset_ ||
        t.offset > file_.size() - data_offset_ - t.nbytes)
      fail("{}: tensor '{}' data (offset {}, {} bytes) runs past the end of the file ({} bytes; truncated?)", path,
           t.name, t.offset, t.nbytes, file_.size());
    t.data = file_.data() + data_offset_ + t.offset;
  }
  std::vector<const GgufTensor*> by_off;
  for (auto& t : tensors_) by_off.push_back(&t);
  std::sort(by_off.begin(), by_off.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_off.size(); ++i)
    if (by_off[i - 1]->offset + by_off[i - 1]->nbytes > by_off[i]->offset)
      fail("{}: tensors '{}' and '{}' overlap", path, by_off[i - 1]->name, by_off[i]->name);
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_int() || v->type == GgufValueType::BOOL) fail("{}: metadata '{}' must be an integer", path(), key);
  return v->i;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_float()) return v->f;
  if (v->is_int() && v->type != GgufValueType::BOOL) return double(v->i);
  fail("{}: metadata '{}' must be a number", path(), key);
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::BOOL) fail("{}: metadata '{}' must be a bool", path(), key);
  return v->i != 0;
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::STRING) fail("{}: metadata '{}' must be a string", path(), key);
  return v->s;
}

const std::vector<std::string>* GgufFile::get_strings(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (v->type != GgufValueType::ARRAY || v->elem_type != GgufValueType::STRING)
    fail("{}: metadata '{}' must be an array of strings", path(), key);
  return &v->strings;
}

const std::vector<int64_t>* GgufFile::get_ints(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (v->type != GgufValueType::ARRAY || !v->floats.empty() || !v->strings.empty() ||
      v->elem_type == GgufValueType::F32 || v->elem_type == GgufValueType::F64 ||
      v->elem_type == GgufValueType::STRING)
    fail("{}: metadata '{}' must be an array of integers", path(), key);
  return &v->ints;
}

const std::vector<double>* GgufFile::get_floats(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (v->type != GgufValueType::ARRAY || (v->elem_type != GgufValueType::F32 && v->elem_type != GgufValueType::F64))
    fail("{}: metadata '{}' must be an array of floats", path(), key);
  return &v->floats;
}

const GgufTensor* GgufFile::tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace tf
