#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tf {

// What a drafter may look at for one sequence. Model-provided drafters (MTP, DSpark) will read the sequence's
// hidden state through the model; the context drafter needs only the tokens.
struct DraftInput {
  const std::vector<int32_t>* tokens = nullptr;  // prompt + reply so far; the last one is being fed this round
  int64_t max_tokens = 0;                        // at most this many proposals
  const std::vector<int32_t>* pages = nullptr;   // the sequence's KV pages (model drafters read its state there)
};

class Model;

// Proposes tokens that the engine verifies against its own sampling; a proposal never changes the reply.
class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual const char* name() const = 0;
  virtual std::vector<int32_t> propose(const DraftInput& in) = 0;
};

// Prompt lookup: continue the most recent earlier occurrence of the longest suffix n-gram of the sequence.
class ContextDrafter : public Drafter {
 public:
  explicit ContextDrafter(int max_ngram = 3, int min_ngram = 2) : max_ngram_(max_ngram), min_ngram_(min_ngram) {}
  const char* name() const override { return "ctx"; }
  std::vector<int32_t> propose(const DraftInput& in) override;

 private:
  int max_ngram_, min_ngram_;
};

// The model's own drafter (DeepSeek's MTP layer), greedy over its logits.
class MtpDrafter : public Drafter {
 public:
  explicit MtpDrafter(Model& model) : model_(model) {}
  const char* name() const override { return "mtp"; }
  std::vector<int32_t> propose(const DraftInput& in) override;

 private:
  Model& model_;
};

// "auto" (ctx), "none", "ctx" or "mtp" (models that ship an MTP layer); nullptr for none. Throws for an unknown name
// or an MTP request the model cannot serve.
std::unique_ptr<Drafter> make_drafter(const std::string& name, Model* model = nullptr);

}  // namespace tf
