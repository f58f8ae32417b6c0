#include "io/hf_config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"

namespace tf {

using json = nlohmann::json;

struct JsonConfig::Node {
  json j;
};

namespace {
const json& J(const void* p) { return *static_cast<const json*>(p); }
}  // namespace

JsonConfig::JsonConfig(std::shared_ptr<const Node> root, const void* node, std::string where)
    : root_(std::move(root)), node_(node), where_(std::move(where)) {}

JsonConfig JsonConfig::parse(std::string_view text, const std::string& name) {
  auto n = std::make_shared<Node>();
  try {
    n->j = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    fail("{}: not valid JSON: {}", name, e.what());
  }
  if (!n->j.is_object()) fail("{}: must hold a JSON object", name);
  const void* node = &n->j;
  return JsonConfig(std::move(n), node, name);
}

JsonConfig JsonConfig::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

std::string JsonConfig::key_path(std::string_view key) const {
  const auto colon = where_.find(": ");
  if (colon == std::string::npos) return fmt::format("{}: '{}'", where_, key);
  return fmt::format("{}: '{}.{}'", where_.substr(0, colon), where_.substr(colon + 2), key);
}

const void* JsonConfig::at(std::string_view key) const {
  const json& o = J(node_);
  auto it = o.find(std::string(key));
  if (it == o.end() || it->is_null()) return nullptr;
  return &*it;
}

const void* JsonConfig::need(std::string_view key) const {
  const void* v = at(key);
  if (!v) fail("{} is required but missing", key_path(key));
  return v;
}

bool JsonConfig::has(std::string_view key) const { return at(key) != nullptr; }

int64_t JsonConfig::get_int(std::string_view key) const {
  const json& v = J(need(key));
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::fabs(d) < 0x1.0p62 && d == std::floor(d)) return int64_t(d);
  }
  fail("{} must be an integer, found {}", key_path(key), v.dump());
}

double JsonConfig::get_float(std::string_view key) const {
  const json& v = J(need(key));
  if (v.is_number()) return v.get<double>();
  fail("{} must be a number, found {}", key_path(key), v.dump());
}

bool JsonConfig::get_bool(std::string_view key) const {
  const json& v = J(need(key));
  if (v.is_boolean()) return v.get<bool>();
  fail("{} must be true or false, found {}", key_path(key), v.dump());
}

std::string JsonConfig::get_string(std::string_view key) const {
  const json& v = J(need(key));
  if (v.is_string()) return v.get<std::string>();
  fail("{} must be a string, found {}", key_path(key), v.dump());
}

std::vector<int64_t> JsonConfig::get_ints(std::string_view key) const {
  const json& v = J(need(key));
  if (v.is_number_integer()) return {v.get<int64_t>()};
  if (!v.is_array()) fail("{} must be a list of integers, found {}", key_path(key), v.dump());
  std::vector<int64_t> out;
  for (const json& e : v) {
    if (!e.is_number_integer()) fail("{} must be a list of integers, found {}", key_path(key), e.dump());
    out.push_back(e.get<int64_t>());
  }
  return out;
}

std::string JsonConfig::get_choice(std::string_view key, std::initializer_list<std::string_view> allowed) const {
  const std::string s = get_string(key);
  std::string list;
  for (std::string_view a : allowed) {
    if (s == a) return s;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  fail("{} is '{}', which is not supported (known: {})", key_path(key), s, list);
}

JsonConfig JsonConfig::sub(std::string_view key) const {
  const json& v = J(need(key));
  if (!v.is_object()) fail("{} must be an object, found {}", key_path(key), v.dump());
  const auto colon = where_.find(": ");
  const std::string where =
      colon == std::string::npos ? fmt::format("{}: {}", where_, key) : fmt::format("{}.{}", where_, key);
  return JsonConfig(root_, &v, where);
}

std::optional<int64_t> JsonConfig::opt_int(std::string_view key) const {
  return has(key) ? std::optional<int64_t>(get_int(key)) : std::nullopt;
}
std::optional<double> JsonConfig::opt_float(std::string_view key) const {
  return has(key) ? std::optional<double>(get_float(key)) : std::nullopt;
}
std::optional<bool> JsonConfig::opt_bool(std::string_view key) const {
  return has(key) ? std::optional<bool>(get_bool(key)) : std::nullopt;
}
std::optional<std::string> JsonConfig::opt_string(std::string_view key) const {
  return has(key) ? std::optional<std::string>(get_string(key)) : std::nullopt;
}
std::optional<JsonConfig> JsonConfig::opt_sub(std::string_view key) const {
  return has(key) ? std::optional<JsonConfig>(sub(key)) : std::nullopt;
}

}  // namespace tf
