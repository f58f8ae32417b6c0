#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace tf::cli {

// Each subcommand adds its options to the app and returns the function that runs it.
using Runner = std::function<int()>;
Runner add_run(CLI::App& app);
Runner add_chat(CLI::App& app);
Runner add_info(CLI::App& app);
Runner add_logits(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_detokenize(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_serve(CLI::App& app);

std::vector<int32_t> parse_id_list(const std::string& s, const char* what = "token id");  // "1,2,3", spaces allowed
// --thinking / --no-thinking and --no-qat (DeepSeek-V4), for run, chat and serve.
void add_model_mode_flags(CLI::App* c, int& thinking, bool& qat);
std::vector<std::string> read_lines(const std::string& path);  // split on '\n', raw bytes
void write_npy_f32(const std::string& path, const float* data, int64_t rows, int64_t cols);
// Prompt tokens a sequence prefills per round unless --chunk says: GPU products fill the device only at 512 rows.
int64_t default_chunk(const std::string& backend, int64_t cpu_chunk);

}  // namespace tf::cli
