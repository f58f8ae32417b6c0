#include <cstdio>

#include "base/error.h"
#include "cli/common.h"
#include "engine/direct.h"
#include "engine/loaded_model.h"

namespace tf::cli {

Runner add_logits(CLI::App& app) {
  auto* c = app.add_subcommand("logits", "teacher-forced logits of every prompt position as float32 .npy [T, vocab]");
  struct Opts {
    std::string model, tokens, prompt, out;
    int64_t chunk = 0, context = 4096, mtp = 0;
    bool qat = false;
    std::string mtp_out;
    int threads = 0;
    std::string backend = "auto";
  };
  auto o = std::make_shared<Opts>();
  c->add_option("model", o->model, "GGUF model file")->required();
  auto* t = c->add_option("--tokens", o->tokens, "token ids: 1,2,3");
  auto* p = c->add_option("-p,--prompt", o->prompt, "prompt text");
  t->excludes(p);
  c->add_option("--out", o->out, "output .npy")->required();
  c->add_option("--chunk", o->chunk, "prefill N tokens per forward through the KV cache (0: all at once)");
  c->add_option("--context", o->context);
  c->add_flag("--qat", o->qat, "DeepSeek-V4: apply the release's FP8/FP4 activation roundings (off here: the oracles "
                                "compare float forwards)");
  c->add_option("--mtp-drafts", o->mtp, "also print this many MTP drafts after the tokens (models with MTP)");
  c->add_option("--mtp-out", o->mtp_out, "write the MTP drafts' logits as .npy [drafts, vocab]");
  c->add_option("--threads", o->threads);
  c->add_option("--backend", o->backend,
                "auto, cpu or cuda (auto: CUDA when a GPU of compute capability 9.0+ can run the model)");
  return [o] {
    ThreadPool pool(o->threads);
    LoadedModel m = load_model(o->model, pool, "", o->backend, -1, o->qat);
    std::vector<int32_t> ids = o->tokens.empty() ? m.tokenizer->encode(o->prompt) : parse_id_list(o->tokens);
    if (ids.empty()) fail("no tokens given");
    for (auto id : ids)
      if (id >= m.tokenizer->n_vocab()) fail("token id {} is outside the vocabulary of {}", id, m.tokenizer->n_vocab());
    auto logits = prompt_logits(*m.model, ids, o->chunk);
    write_npy_f32(o->out, logits.data(), int64_t(ids.size()), m.model->info().n_vocab);
    if (o->mtp > 0) {
      std::vector<float> lg;
      const auto drafts = mtp_drafts(*m.model, ids, o->mtp, &lg);
      std::string line = "mtp drafts:";
      for (int32_t d : drafts) line += " " + std::to_string(d);
      std::printf("%s\n", line.c_str());
      if (!o->mtp_out.empty()) write_npy_f32(o->mtp_out, lg.data(), int64_t(drafts.size()), m.model->info().n_vocab);
    }
    return 0;
  };
}

Runner add_tokenize(CLI::App& app) {
  auto* c = app.add_subcommand("tokenize", "token ids of each line of a file, one output line per input line");
  auto tok = std::make_shared<std::string>(), lines = std::make_shared<std::string>();
  auto no_special = std::make_shared<bool>(false);
  c->add_option("tokenizer", *tok, ".gguf model or tokenizer.json")->required();
  c->add_option("--lines", *lines, "input file, split on newlines")->required();
  c->add_flag("--no-special", *no_special, "treat special token text as plain text");
  return [tok, lines, no_special] {
    auto t = Tokenizer::from_path(*tok);
    std::string out;
    for (auto& line : read_lines(*lines)) {
      auto ids = t->encode(line, !*no_special);
      for (size_t i = 0; i < ids.size(); ++i) out += (i ? " " : "") + std::to_string(ids[i]);
      out += '\n';
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  };
}

Runner add_detokenize(CLI::App& app) {
  auto* c = app.add_subcommand("detokenize", "hex of the bytes each line of ids decodes to");
  auto tok = std::make_shared<std::string>(), lines = std::make_shared<std::string>();
  c->add_option("tokenizer", *tok, ".gguf model or tokenizer.json")->required();
  c->add_option("--lines", *lines, "input file of space-separated ids per line")->required();
  return [tok, lines] {
    auto t = Tokenizer::from_path(*tok);
    static const char* kHex = "0123456789abcdef";
    std::string out;
    for (auto& line : read_lines(*lines)) {
      for (char ch : t->decode(parse_id_list(line))) {
        out += kHex[uint8_t(ch) >> 4];
        out += kHex[uint8_t(ch) & 15];
      }
      out += '\n';
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  };
}

}  // namespace tf::cli
