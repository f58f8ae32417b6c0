#include <cstdio>
#include <map>

#include "base/error.h"
#include "cli/common.h"

int main(int argc, char** argv) {
  CLI::App app{"tensorfold: exact LLM inference with an OpenAI-compatible server"};
  app.require_subcommand(1);
  std::map<CLI::App*, tf::cli::Runner> runners;
  for (auto add : {tf::cli::add_serve, tf::cli::add_run, tf::cli::add_chat, tf::cli::add_info, tf::cli::add_logits,
                   tf::cli::add_tokenize, tf::cli::add_detokenize, tf::cli::add_bench}) {
    size_t before = app.get_subcommands({}).size();
    auto r = add(app);
    runners[app.get_subcommands({}).at(before)] = r;
  }
  CLI11_PARSE(app, argc, argv);
  try {
    for (auto* sub : app.get_subcommands()) return runners.at(sub)();
  } catch (const tf::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
