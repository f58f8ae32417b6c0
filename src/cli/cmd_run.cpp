#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/common.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"

namespace tf::cli {
namespace {

struct GenOpts {
  std::string model, prompt, tokens, ids_out, chat_template, backend = "auto";
  int64_t n = 128, context = 4096, top_k = 0;
  double temperature = 0.8, top_p = 1.0, min_p = 0.0;
  int64_t seed = -1;
  int threads = 0;
  bool ignore_eos = false, chat = false;
  int thinking = -1;
  bool qat = true;
};

void add_gen_options(CLI::App* c, GenOpts& o) {
  c->add_option("model", o.model, "GGUF model file")->required();
  c->add_option("-n,--n-predict", o.n, "tokens to generate");
  c->add_option("--context", o.context, "context size in tokens");
  c->add_option("--temperature", o.temperature, "0 for greedy");
  c->add_option("--top-k", o.top_k);
  c->add_option("--top-p", o.top_p);
  c->add_option("--min-p", o.min_p);
  c->add_option("--seed", o.seed, "sampling seed (default: derived from the prompt)");
  c->add_option("--threads", o.threads, "worker threads (0: all cores)");
  c->add_option("--backend", o.backend,
                "auto, cpu or cuda (auto: CUDA when a GPU of compute capability 9.0+ can run the model)");
  c->add_option("--chat-template", o.chat_template,
                "chatml, llama3, deepseek or deepseek_v4 instead of the file's template");
  add_model_mode_flags(c, o.thinking, o.qat);
}

// Streams one request through a one-lane engine (the server's own code path) to stdout.
EngineResult stream_reply(Engine& engine, EngineRequest req) {
  auto h = engine.submit(std::move(req));
  std::string text;
  std::vector<TokenLogprob> lps;
  while (h->wait_next(text, lps)) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    text.clear();
  }
  EngineResult r = h->wait_result();
  // The engine logs a failed round and ends the request; a one-shot command must say so and exit non-zero.
  if (r.finish_reason == "error") fail("the model failed while generating: {}", r.error);
  return r;
}

EngineOptions one_lane(const GenOpts& o, const LoadedModel& m) {
  EngineOptions e;
  e.parallel = 1;
  e.context = std::min<int64_t>(o.context, m.model->info().n_ctx_train);
  e.chunk = default_chunk(m.backend.name, 256);
  e.prompt_cache_gib = 0;
  return e;
}

SamplingParams sampling_of(const GenOpts& o, const std::vector<int32_t>& prompt) {
  SamplingParams p;
  p.temperature = o.temperature;
  p.top_k = o.top_k;
  p.top_p = o.top_p;
  p.min_p = o.min_p;
  p.seed = o.seed >= 0 ? uint64_t(o.seed) : sampler::seed_from_prompt(prompt, "tensorfold");
  return p;
}

}  // namespace

Runner add_run(CLI::App& app) {
  auto* c = app.add_subcommand("run", "generate a completion of a prompt and stream it to stdout");
  auto o = std::make_shared<GenOpts>();
  add_gen_options(c, *o);
  auto* p = c->add_option("-p,--prompt", o->prompt, "prompt text");
  auto* t = c->add_option("--tokens", o->tokens, "prompt as token ids: 1,2,3");
  p->excludes(t);
  c->add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-generation tokens");
  c->add_flag("--chat", o->chat, "wrap the prompt as one user turn of the model's chat template");
  c->add_option("--ids-out", o->ids_out, "write {prompt_ids, ids} as JSON");
  return [o] {
    ThreadPool pool(o->threads);
    LoadedModel m = load_model(o->model, pool, o->chat_template, o->backend, o->thinking, o->qat);
    check_context(m, one_lane(*o, m).context);
    std::vector<int32_t> prompt;
    if (!o->tokens.empty()) {
      prompt = parse_id_list(o->tokens);
      for (auto id : prompt)
        if (id >= m.tokenizer->n_vocab())
          fail("token id {} is outside the vocabulary of {}", id, m.tokenizer->n_vocab());
    } else {
      std::string text = o->prompt;
      if (o->chat) {
        if (!m.chat) fail("the model has no chat template; pass --chat-template");
        text = m.chat->render({{"user", o->prompt, {}}}, true);
      }
      prompt = m.tokenizer->encode(text);
    }
    Engine engine(*m.model, *m.tokenizer, one_lane(*o, m));
    if (prompt.empty()) fail("the prompt is empty");
    if (int64_t(prompt.size()) >= engine.context())
      fail("the prompt has {} tokens but the context holds {}", prompt.size(), engine.context());
    EngineRequest req;
    req.prompt = prompt;
    req.max_tokens = std::min<int64_t>(o->n, engine.context() - int64_t(prompt.size()));
    req.ignore_eos = o->ignore_eos;
    req.sampling = sampling_of(*o, prompt);
    EngineResult res = stream_reply(engine, req);
    const double prompt_s = res.ttft_s, decode_s = res.total_s - res.ttft_s;
    std::printf("\nprompt tokens: %zu, generated tokens: %zu, prompt %.1f tok/s, decode %.1f tok/s\n", prompt.size(),
                res.ids.size(), double(prompt.size()) / std::max(1e-9, prompt_s),
                res.ids.size() > 1 ? double(res.ids.size() - 1) / std::max(1e-9, decode_s) : 0.0);
    if (!o->ids_out.empty()) {
      std::ofstream f(o->ids_out);
      f << nlohmann::json{{"prompt_ids", prompt}, {"ids", res.ids}, {"finish_reason", res.finish_reason}}.dump();
      if (!f) fail("cannot write '{}'", o->ids_out);
    }
    return 0;
  };
}

Runner add_chat(CLI::App& app) {
  auto* c = app.add_subcommand("chat", "interactive chat in the terminal (empty line or EOF ends it)");
  auto o = std::make_shared<GenOpts>();
  add_gen_options(c, *o);
  c->add_option("--system", o->prompt, "system message");
  return [o] {
    ThreadPool pool(o->threads);
    LoadedModel m = load_model(o->model, pool, o->chat_template, o->backend, o->thinking, o->qat);
    check_context(m, one_lane(*o, m).context);
    if (!m.chat) fail("the model has no chat template; pass --chat-template");
    Engine engine(*m.model, *m.tokenizer, one_lane(*o, m));
    std::vector<ChatMessage> history;
    if (!o->prompt.empty()) history.push_back({"system", o->prompt, {}});
    std::string line;
    for (;;) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
      if (!std::getline(std::cin, line) || line.empty()) break;
      history.push_back({"user", line, {}});
      EngineRequest req;
      req.prompt = m.tokenizer->encode(m.chat->render(history, true));
      if (int64_t(req.prompt.size()) >= engine.context()) {
        std::printf("(the conversation no longer fits the context of %lld tokens)\n", (long long)engine.context());
        break;
      }
      req.max_tokens = std::min<int64_t>(o->n, engine.context() - int64_t(req.prompt.size()));
      req.sampling = sampling_of(*o, req.prompt);
      EngineResult res = stream_reply(engine, req);
      std::printf("\n");
      history.push_back({"assistant", res.text, {}});
    }
    return 0;
  };
}

}  // namespace tf::cli
