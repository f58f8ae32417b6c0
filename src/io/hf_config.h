#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

// Typed reads of a Hugging Face style JSON file (config.json, generation_config.json). A required key that is
// missing, a value of the wrong kind or a value outside the known set is an error naming the file and the key path.
class JsonConfig {
 public:
  static JsonConfig load(const std::string& path);
  static JsonConfig parse(std::string_view text, const std::string& name);

  const std::string& where() const { return where_; }
  bool has(std::string_view key) const;  // present and not null

  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;  // integers are accepted
  bool get_bool(std::string_view key) const;
  std::string get_string(std::string_view key) const;
  std::vector<int64_t> get_ints(std::string_view key) const;  // a list, or one integer read as a list of one
  // A string that must be one of `allowed`.
  std::string get_choice(std::string_view key, std::initializer_list<std::string_view> allowed) const;
  JsonConfig sub(std::string_view key) const;  // a nested object

  std::optional<int64_t> opt_int(std::string_view key) const;
  std::optional<double> opt_float(std::string_view key) const;
  std::optional<bool> opt_bool(std::string_view key) const;
  std::optional<std::string> opt_string(std::string_view key) const;
  std::optional<JsonConfig> opt_sub(std::string_view key) const;

 private:
  struct Node;
  JsonConfig(std::shared_ptr<const Node> root, const void* node, std::string where);
  const void* at(std::string_view key) const;         // nullptr when absent or null
  const void* need(std::string_view key) const;       // error when absent or null
  std::string key_path(std::string_view key) const;

  std::shared_ptr<const Node> root_;
  const void* node_ = nullptr;  // the json object this view reads
  std::string where_;           // "path" or "path: a.b" for nested views
};

}  // namespace tf
