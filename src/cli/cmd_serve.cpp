#include <csignal>
#include <filesystem>
#include <thread>

#include "base/log.h"
#include "cli/common.h"
#include "engine/loaded_model.h"
#include "server/http_server.h"

namespace tf::cli {
namespace {
server::HttpServer* g_server = nullptr;
}

Runner add_serve(CLI::App& app) {
  auto* c = app.add_subcommand("serve", "serve a model over the OpenAI-compatible HTTP API");
  struct Opts {
    std::string model, chat_template, key_file;
    int thinking = -1;
    bool qat = true;
    server::ServerOptions s;
    int threads = 0;
    std::string backend = "auto";
  };
  auto o = std::make_shared<Opts>();
  c->add_option("model", o->model, "GGUF model file")->required();
  c->add_option("--host", o->s.host);
  c->add_option("--port", o->s.port);
  c->add_option("--name", o->s.name, "model id (default: the file name without .gguf)");
  c->add_option("--context", o->s.engine.context, "context size in tokens (prompt + reply)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  c->add_option("--parallel", o->s.engine.parallel, "sequences decoded together per lane round")
      ->check(CLI::Range(1, 4096));
  c->add_option("--max-queue", o->s.engine.max_queue, "waiting requests before 503")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  auto* chunk = c->add_option("--chunk", o->s.engine.chunk, "prompt tokens per sequence per round (128; CUDA: 512)")
                    ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  c->add_option("--prompt-cache-gib", o->s.engine.prompt_cache_gib, "memory for the prefix cache")
      ->check(CLI::Range(0.0, 1.0e6));
  c->add_option("--drafter", o->s.engine.drafter, "auto (ctx), none, ctx, or mtp for models that ship an MTP layer");
  c->add_option("--draft-max", o->s.engine.draft_max, "drafted tokens per round and sequence")
      ->check(CLI::Range(int64_t(0), int64_t(64)));
  c->add_flag_callback(
      "--no-drafts", [o] { o->s.engine.drafter = "none"; }, "serve every request serially");
  c->add_option("--api-key-file", o->key_file, "accepted API keys, one per line (raw or sha256:HEX)");
  c->add_option("--max-tokens", o->s.max_tokens, "default reply cap");
  c->add_option("--temperature", o->s.temperature, "default temperature");
  c->add_option("--top-p", o->s.top_p);
  c->add_option("--top-k", o->s.top_k);
  c->add_option("--min-p", o->s.min_p);
  c->add_option("--seed-salt", o->s.seed_salt, "salt of the prompt-derived seed");
  c->add_option("--threads", o->threads, "compute threads (0: all cores)");
  c->add_option("--backend", o->backend,
                "auto, cpu or cuda (auto: CUDA when a GPU of compute capability 9.0+ can run the model)");
  c->add_option("--chat-template", o->chat_template,
                "chatml, llama3, deepseek or deepseek_v4 instead of the file's template");
  add_model_mode_flags(c, o->thinking, o->qat);
  return [o, chunk] {
    ThreadPool pool(o->threads);
    LoadedModel m = load_model(o->model, pool, o->chat_template, o->backend, o->thinking, o->qat);
    log::info("backend {}: {}", m.backend.name, m.backend.detail);
    if (chunk->count() == 0) o->s.engine.chunk = default_chunk(m.backend.name, o->s.engine.chunk);
    log::info("prompt chunk: {} tokens a sequence per round", o->s.engine.chunk);
    if (o->s.name.empty()) o->s.name = std::filesystem::path(o->model).stem().string();
    o->s.engine.context = std::min(o->s.engine.context, m.model->info().n_ctx_train);
    check_context(m, o->s.engine.context);
    if (!o->key_file.empty()) o->s.key_hashes = server::load_api_keys(o->key_file);
    server::HttpServer srv(m, o->s);
    if (auto note = m.model->memory_note(); !note.empty()) log::info("{}", note);  // after the KV pool took its share
    g_server = &srv;
    std::signal(SIGINT, [](int) {
      if (g_server) g_server->stop();
    });
    std::signal(SIGTERM, [](int) {
      if (g_server) g_server->stop();
    });
    srv.run();
    g_server = nullptr;
    log::info("stopped");
    return 0;
  };
}

}  // namespace tf::cli
