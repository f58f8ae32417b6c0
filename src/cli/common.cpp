#include "cli/common.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace tf::cli {

void add_model_mode_flags(CLI::App* c, int& thinking, bool& qat) {
  c->add_flag_callback("--thinking", [&thinking] { thinking = 1; }, "DeepSeek-V4: reason in <think> first (default)");
  c->add_flag_callback("--no-thinking", [&thinking] { thinking = 0; }, "DeepSeek-V4: chat mode, answer directly");
  c->add_flag_callback("--no-qat", [&qat] { qat = false; }, "DeepSeek-V4: skip the release's FP8/FP4 roundings");
}

std::vector<int32_t> parse_id_list(const std::string& s, const char* what) {
  std::vector<int32_t> out;
  std::string cur;
  auto flush = [&] {
    if (cur.empty()) return;
    try {
      size_t used = 0;
      long v = std::stol(cur, &used);
      if (used != cur.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(cur);
      out.push_back(int32_t(v));
    } catch (const std::exception&) {
      fail("'{}' is not a {}", cur, what);
    }
    cur.clear();
  };
  for (char c : s) {
    if (c == ',' || c == ' ') flush();
    else cur += c;
  }
  flush();
  return out;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string all = ss.str();
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < all.size()) {
    size_t nl = all.find('\n', start);
    if (nl == std::string::npos) nl = all.size();
    lines.push_back(all.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

void write_npy_f32(const std::string& path, const float* data, int64_t rows, int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("cannot write '{}'", path);
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  uint16_t hl = uint16_t(header.size());
  bool ok = std::fwrite(magic, 1, 8, f) == 8 && std::fwrite(&hl, 2, 1, f) == 1 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
            std::fwrite(data, sizeof(float), size_t(rows * cols), f) == size_t(rows * cols);
  ok = (std::fflush(f) == 0) && ok;
  std::fclose(f);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) fail("failed writing '{}'", path);
}

int64_t default_chunk(const std::string& backend, int64_t cpu_chunk) { return backend == "cuda" ? 512 : cpu_chunk; }

}  // namespace tf::cli
