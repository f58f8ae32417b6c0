#include <gtest/gtest.h>

#include "base/error.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace tf {
namespace {

std::string smol_json() { return std::string(TF_SOURCE_DIR) + "/tests/fixtures/smollm2/tokenizer.json"; }

TEST(Unicode, SanitizeReplacesMaximalSubparts) {
  EXPECT_EQ(unicode::sanitize_utf8("abc"), "abc");
  EXPECT_EQ(unicode::sanitize_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");               // overlong: two
  EXPECT_EQ(unicode::sanitize_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: three
  EXPECT_EQ(unicode::sanitize_utf8("\xF0\x9F\x98"), "\xEF\xBF\xBD");                        // truncated: one
  EXPECT_EQ(unicode::sanitize_utf8("\xE1\x80" "A"), "\xEF\xBF\xBD" "A");
  EXPECT_EQ(unicode::sanitize_utf8("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

TEST(Unicode, CompletePrefixHoldsUnfinishedCharacters) {
  EXPECT_EQ(unicode::complete_prefix("ab\xF0\x9F"), 2u);
  EXPECT_EQ(unicode::complete_prefix("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(unicode::complete_prefix("\xC3"), 0u);
}

TEST(Detokenizer, NeverEmitsHalfACharacter) {
  auto tok = Tokenizer::from_json_file(smol_json());
  // An emoji and CJK encode to several byte-level tokens; every emitted piece must be whole UTF-8.
  const std::string text = "a 😂😂 龍 é\u0301 end";
  auto ids = tok->encode(text);
  IncrementalDetokenizer d(*tok);
  std::string all;
  for (auto id : ids) {
    std::string piece = d.push(id);
    EXPECT_EQ(unicode::sanitize_utf8(piece), piece);
    EXPECT_EQ(unicode::complete_prefix(piece), piece.size());
    all += piece;
  }
  all += d.flush();
  EXPECT_EQ(all, text);
}

TEST(Detokenizer, UnfinishedTailBecomesReplacementAtFlush) {
  auto tok = Tokenizer::from_json_file(smol_json());
  auto ids = tok->encode("😂");
  ASSERT_GT(ids.size(), 1u);
  IncrementalDetokenizer d(*tok);
  EXPECT_EQ(d.push(ids[0]), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
}

TEST(Tokenizer, SpecialTokensAndRoundTrip) {
  auto tok = Tokenizer::from_json_file(smol_json());
  auto ids = tok->encode("<|im_start|>user\nHi<|im_end|>");
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(tok->decode(ids), "<|im_start|>user\nHi<|im_end|>");
  EXPECT_EQ(tok->decode(ids, false), "user\nHi");
  EXPECT_TRUE(tok->is_end_of_generation(2));
  EXPECT_TRUE(tok->is_end_of_generation(0));
  auto plain = tok->encode("<|im_start|>", false);
  EXPECT_GT(plain.size(), 1u);
}

TEST(ChatFormat, ChatMLWithTheTemplatesDefaultSystemTurn) {
  const std::string tmpl =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
      "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
      "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}";
  ChatFormat f = ChatFormat::from_template(tmpl);
  EXPECT_STREQ(f.name(), "chatml");
  EXPECT_EQ(f.render({{"user", "Hi", ""}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(f.render({{"system", "S", ""}, {"user", "Hi", ""}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatFormat, Llama3AndDeepSeekAndRefusal) {
  ChatFormat l = ChatFormat::from_template("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}");
  EXPECT_EQ(l.render({{"user", "Hi", ""}}, true),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  ChatFormat d = ChatFormat::from_template("{{'<｜User｜>' + message['content']}}");
  EXPECT_EQ(d.render({{"system", "S", ""}, {"user", "Hi", ""}, {"assistant", "Yo", ""}}, false),
            "S<｜User｜>Hi<｜Assistant｜>Yo<｜end▁of▁sentence｜>");
  try {
    ChatFormat::from_template("{{ messages | something_else }}");
    FAIL() << "an unknown template must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--chat-template"), std::string::npos);
  }
}

}  // namespace
}  // namespace tf
