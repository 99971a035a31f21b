// Chat formats (tokenizer/chat.h) against Jinja2's rendering of the templates
// (tests/data/chat/golden.json, written by train/make_chat_fixtures.py), and their errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "tokenizer/chat.h"
#include "util/error.h"

namespace llada::tokenizer {
namespace {

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(ChatTemplate, RendersAsJinjaDoes) {
    std::ifstream f(std::filesystem::path(LLADA_TEST_DATA) / "chat" / "golden.json");
    ASSERT_TRUE(f) << "tests/data/chat/golden.json is missing";
    const auto golden = nlohmann::json::parse(f);
    const std::map<std::string, ChatFormat> want = {{"llama3", ChatFormat::Llama3},
                                                    {"chatml-default-system", ChatFormat::ChatML},
                                                    {"chatml", ChatFormat::ChatML},
                                                    {"plain", ChatFormat::Plain},
                                                    {"plain-spaced", ChatFormat::Plain}};
    int n = 0;
    for (const auto& c : golden["cases"]) {
        const std::string name = c["template_name"];
        SCOPED_TRACE(name + " / message count " + std::to_string(c["messages"].size()));
        const ChatTemplate t = ChatTemplate::from_text(c["template"].get<std::string>());
        EXPECT_EQ(t.format(), want.at(name));
        std::vector<ChatMessage> msgs;
        for (const auto& m : c["messages"])
            msgs.push_back({m["role"], m["content"]});
        EXPECT_EQ(t.render(msgs), c["expected"].get<std::string>());
        ++n;
    }
    EXPECT_EQ(n, 15);
}

TEST(ChatTemplate, DefaultSystemMessageOnlyWhenLiteral) {
    EXPECT_EQ(ChatTemplate::from_text("{{ '<|im_start|>system\\nYou are a helpful assistant."
                                      "<|im_end|>\\n' }}")
                  .default_system(),
              "You are a helpful assistant.");
    // The system message spliced in from the conversation is not a default.
    EXPECT_EQ(ChatTemplate::from_text(
                  "{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}")
                  .default_system(),
              "");
}

TEST(ChatTemplate, ErrorsNameTheProblem) {
    EXPECT_NE(error_of([] { ChatTemplate::from_text(""); }).find("declares no chat format"),
              std::string::npos);
    const std::string mistral =
        error_of([] { ChatTemplate::from_text("{{ bos_token }}[INST] {{ messages }} [/INST]"); });
    EXPECT_NE(mistral.find("not one llada.cpp knows"), std::string::npos) << mistral;
    EXPECT_NE(mistral.find("[INST]"), std::string::npos) << mistral;
    EXPECT_NE(mistral.find("llama3"), std::string::npos) << mistral;
    EXPECT_NE(mistral.find("chatml"), std::string::npos) << mistral;
    const ChatTemplate plain = ChatTemplate::from_text(
        "{% for message in messages %}{{ message['content'] }}{% endfor %}");
    EXPECT_NE(error_of([&] { plain.render({}); }).find("at least one message"), std::string::npos);
    const std::string role = error_of([&] { plain.render({{"user", "a"}, {"tool", "b"}}); });
    EXPECT_NE(role.find("message 1 has role 'tool'"), std::string::npos) << role;
}

}  // namespace
}  // namespace llada::tokenizer
