#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <climits>
#include <queue>

#include "base/error.h"
#include "tokenizer/unicode.h"

namespace tf {
namespace {
const char* const kEogTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>",
                                 "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>",
                                 "<end_of_utterance>", "<｜end▁of▁sentence｜>"};
constexpr size_t kCacheMax = 1 << 16;
}  // namespace

Tokenizer::Tokenizer(Spec spec)
    : tokens_(std::move(spec.tokens)),
      kinds_(std::move(spec.kinds)),
      pre_(std::move(spec.pre)),
      pre_name_(std::move(spec.pre_name)),
      nfc_(spec.nfc),
      ignore_merges_(spec.ignore_merges),
      add_bos_(spec.add_bos),
      bos_(spec.bos),
      eos_(spec.eos) {
  if (tokens_.empty()) fail("tokenizer has an empty vocabulary");
  kinds_.resize(tokens_.size(), TokenKind::Normal);
  for (size_t i = 0; i < tokens_.size(); ++i) vocab_.emplace(tokens_[i], int32_t(i));
  // A merge whose result has no token could never be emitted; it is left out rather than trusted.
  for (size_t r = 0; r < spec.merges.size(); ++r)
    if (vocab_.count(spec.merges[r].first + spec.merges[r].second))
      merge_rank_.emplace(spec.merges[r].first + " " + spec.merges[r].second, int32_t(r));
  for (size_t i = 0; i < tokens_.size(); ++i) {
    TokenKind k = kinds_[i];
    if (k == TokenKind::Control || k == TokenKind::UserDefined || k == TokenKind::Unknown)
      if (!tokens_[i].empty()) specials_.push_back(int32_t(i));
  }
  std::stable_sort(specials_.begin(), specials_.end(),
                   [&](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });
  if (eos_) eog_.insert(*eos_);
  for (auto id : spec.extra_eog) eog_.insert(id);
  for (const char* t : kEogTexts)
    if (auto id = token_id(t); id && kinds_[*id] == TokenKind::Control) eog_.insert(*id);
}

std::optional<int32_t> Tokenizer::token_id(std::string_view text) const {
  auto it = vocab_.find(std::string(text));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void Tokenizer::bpe_piece(const std::string& piece, std::vector<int32_t>& out) const {
  std::string enc = byte_level_encode(piece);
  if (ignore_merges_) {
    if (auto id = token_id(enc)) return out.push_back(*id);
  }
  {
    std::lock_guard<std::mutex> lk(cache_mu_);
    if (auto it = cache_.find(enc); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  // Characters without a token are dropped before merging, so their neighbours may merge (as Hugging Face does).
  std::vector<std::string> sym;
  for (size_t i = 0; i < enc.size();) {
    size_t s = i;
    unicode::next_code_point(enc, i);
    std::string c = enc.substr(s, i - s);
    if (vocab_.count(c)) sym.push_back(std::move(c));
  }
  // Merge the lowest-rank adjacent pair until none is in the merge list (ties to the leftmost): a heap of candidate
  // pairs over a linked list, checked when popped, so a long word costs n log n rather than n^2.
  const int n = int(sym.size());
  std::vector<int> next(static_cast<size_t>(n)), prev(static_cast<size_t>(n));
  std::vector<char> alive(static_cast<size_t>(n), 1);
  for (int i = 0; i < n; ++i) next[size_t(i)] = i + 1, prev[size_t(i)] = i - 1;
  using Cand = std::pair<int32_t, int>;  // (rank, left position)
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto rank_at = [&](int i) -> int32_t {
    int j = next[size_t(i)];
    if (j >= n) return INT32_MAX;
    auto it = merge_rank_.find(sym[size_t(i)] + " " + sym[size_t(j)]);
    return it == merge_rank_.end() ? INT32_MAX : it->second;
  };
  auto push = [&](int i) {
    if (i < 0 || i >= n) return;
    if (int32_t r = rank_at(i); r != INT32_MAX) heap.push({r, i});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    auto [r, i] = heap.top();
    heap.pop();
    if (!alive[size_t(i)] || rank_at(i) != r) continue;  // stale: one side merged since
    int j = next[size_t(i)];
    sym[size_t(i)] += sym[size_t(j)];
    alive[size_t(j)] = 0;
    next[size_t(i)] = next[size_t(j)];
    if (next[size_t(j)] < n) prev[size_t(next[size_t(j)])] = i;
    push(prev[size_t(i)]);
    push(i);
  }
  std::vector<std::string> merged;
  for (int i = 0; i < n; i = next[size_t(i)]) merged.push_back(std::move(sym[size_t(i)]));
  sym.swap(merged);
  std::vector<int32_t> ids;
  for (auto& s : sym) {
    auto id = token_id(s);
    TF_CHECK(id.has_value(), "merge produced '{}' which is not in the vocabulary", s);
    ids.push_back(*id);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lk(cache_mu_);
  if (cache_.size() >= kCacheMax) cache_.clear();
  cache_.emplace(enc, std::move(ids));
}

void Tokenizer::encode_raw(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string norm = nfc_ ? unicode::nfc(text) : std::string(text);
  if (!pre_ || pre_->empty()) return bpe_piece(norm, out);
  for (auto& piece : pre_->run(norm)) bpe_piece(piece, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view raw, bool parse_special) const {
  std::string text = unicode::sanitize_utf8(raw);
  std::vector<int32_t> out;
  if (add_bos_ && bos_) out.push_back(*bos_);
  size_t start = 0, i = 0;
  while (parse_special && i < text.size()) {
    int32_t hit = -1;
    if (text[i] != '\0') {
      for (int32_t id : specials_) {
        const std::string& t = tokens_[id];
        if (text.compare(i, t.size(), t) == 0) {
          hit = id;
          break;
        }
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    encode_raw(std::string_view(text).substr(start, i - start), out);
    out.push_back(hit);
    i += tokens_[hit].size();
    start = i;
  }
  encode_raw(std::string_view(text).substr(start), out);
  return out;
}

std::string Tokenizer::token_bytes(int32_t id, bool render_special) const {
  if (id < 0 || size_t(id) >= tokens_.size()) return {};
  switch (kinds_[id]) {
    case TokenKind::Normal: case TokenKind::Byte: {
      std::string b;
      if (!byte_level_decode(tokens_[id], b)) return tokens_[id];
      return b;
    }
    case TokenKind::UserDefined: return tokens_[id];
    case TokenKind::Control: case TokenKind::Unknown: return render_special ? tokens_[id] : std::string();
    default: return {};
  }
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  for (auto id : ids) out += token_bytes(id, render_special);
  return out;
}

}  // namespace tf
