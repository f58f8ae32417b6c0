// DeepSeek-V4's chat encoding against strings made by the release's own encoder (encoding/encoding_dsv4.py, run by
// hand as an oracle on the inputs of tests/fixtures/dsv4_chat/cases.json; see tests/fixtures/README.md).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tokenizer/chat_format.h"

using namespace tf;

TEST(ChatFormatV4, MatchesTheReleaseEncoder) {
  std::ifstream in(std::string(TF_SOURCE_DIR) + "/tests/fixtures/dsv4_chat/cases.json");
  ASSERT_TRUE(in);
  const auto cases = nlohmann::json::parse(in);
  ASSERT_GE(cases.size(), 12u);
  for (const auto& c : cases) {
    std::vector<ChatMessage> msgs;
    for (const auto& m : c["messages"])
      msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>(),
                      m.value("reasoning_content", std::string())});
    ChatFormat f = ChatFormat::from_name("deepseek_v4");
    f.set_thinking(c["mode"] == "thinking");
    EXPECT_EQ(f.render(msgs, true), c["text"].get<std::string>()) << c["name"] << " " << c["mode"];
  }
}

TEST(ChatFormatV4, ThinkingIsTheDefaultAndOnlyV4HasIt) {
  ChatFormat f = ChatFormat::from_name("deepseek_v4");
  EXPECT_TRUE(f.has_thinking());
  EXPECT_TRUE(f.thinking());
  EXPECT_FALSE(ChatFormat::from_name("chatml").has_thinking());
  EXPECT_THROW(ChatFormat::from_name("deepseek_v9"), Error);
}
