// Chat formats (tokenizer/chat.h).
#include "tokenizer/chat.h"

#include <utility>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace llada::tokenizer {
namespace {

bool contains(std::string_view s, std::string_view part) {
    return s.find(part) != std::string_view::npos;
}

// The template text without whitespace and Jinja's trim markers, with the three spellings of a
// message's content made one: what the identity template reduces to is then a single string.
std::string normalise(std::string_view t) {
    std::string s;
    for (const char c : t) {
        if (c != ' ' && c != '\n' && c != '\t' && c != '\r') s += c;
    }
    const std::pair<std::string_view, std::string_view> same[] = {
        {"{%-", "{%"},
        {"{{-", "{{"},
        {"-%}", "%}"},
        {"-}}", "}}"},
        {"message.content", "message['content']"},
        {"message[\"content\"]", "message['content']"}};
    for (const auto& [from, to] : same) {
        for (size_t at; (at = s.find(from)) != std::string::npos;)
            s.replace(at, from.size(), to);
    }
    return s;
}

// A literal default system message in a ChatML template: the text between
// "<|im_start|>system\n" (newline written out or as the escape \n) and "<|im_end|>", when it
// contains no quote (a quote means an expression such as messages[0]['content'] is spliced in).
std::string chatml_default_system(std::string_view t) {
    for (const std::string_view open : {"<|im_start|>system\\n", "<|im_start|>system\n"}) {
        for (size_t at = t.find(open); at != std::string_view::npos; at = t.find(open, at + 1)) {
            const size_t from = at + open.size();
            const size_t end = t.find("<|im_end|>", from);
            if (end == std::string_view::npos) continue;
            const std::string_view body = t.substr(from, end - from);
            if (body.empty() || contains(body, "'") || contains(body, "\"")) continue;
            return std::string(body);
        }
    }
    return "";
}

std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return "";
    const auto e = s.find_last_not_of(" \t\r\n");
    return s.substr(b, e - b + 1);
}

}  // namespace

const char* supported_chat_formats() {
    return "llama3 (LLaMA-3 headers, as LLaDA-8B-Instruct), chatml (<|im_start|>, as Dream and "
           "Qwen2), plain (the identity template {% for message in messages %}{{ "
           "message['content'] }}{% endfor %})";
}

ChatTemplate ChatTemplate::from_text(std::string_view text) {
    ChatTemplate t;
    if (text.empty()) {
        throw Error(
            "the model declares no chat format (its file has no tokenizer.chat_template); give "
            "the prompt as plain text");
    }
    if (contains(text, "<|start_header_id|>") && contains(text, "<|end_header_id|>")) {
        t.format_ = ChatFormat::Llama3;
    } else if (contains(text, "<|im_start|>")) {
        t.format_ = ChatFormat::ChatML;
        t.default_system_ = chatml_default_system(text);
    } else if (normalise(text) ==
               normalise("{% for message in messages %}{{ message['content'] }}{% endfor %}")) {
        t.format_ = ChatFormat::Plain;
    } else {
        const std::string start(text.substr(0, 60));
        throw Error("the model's chat template is not one llada.cpp knows (it starts \"" + start +
                    (text.size() > 60 ? "...\"" : "\"") +
                    "); supported: " + supported_chat_formats());
    }
    return t;
}

ChatTemplate ChatTemplate::from_tokenizer(const Tokenizer& tok) {
    ChatTemplate t = from_text(tok.chat_template());
    // The markers a rendering uses, from render_parts itself (one list, not two).
    for (const auto& p : t.render_parts({{"system", ""}, {"user", ""}})) {
        if (p.marker && tok.find_token(p.text) < 0) {
            throw Error(std::string("the model's chat template is ") + t.name() +
                        " but its vocabulary has no " + p.text + " token");
        }
    }
    return t;
}

const char* ChatTemplate::name() const {
    switch (format_) {
        case ChatFormat::Llama3:
            return "llama3";
        case ChatFormat::ChatML:
            return "chatml";
        case ChatFormat::Plain:
            return "plain";
    }
    return "?";
}

std::vector<ChatPart> ChatTemplate::render_parts(const std::vector<ChatMessage>& messages) const {
    if (messages.empty()) throw Error("a chat needs at least one message");
    for (size_t i = 0; i < messages.size(); ++i) {
        const std::string& r = messages[i].role;
        if (r != "system" && r != "user" && r != "assistant") {
            throw Error("message " + std::to_string(i) + " has role '" + r +
                        "'; the roles are system, user and assistant");
        }
    }
    std::vector<ChatPart> out;
    auto text = [&](std::string t) { out.push_back({std::move(t), false}); };
    auto marker = [&](const char* m) { out.push_back({m, true}); };
    switch (format_) {
        case ChatFormat::Plain:
            for (const auto& m : messages)
                text(m.content);
            break;
        case ChatFormat::Llama3:
            for (const auto& m : messages) {
                marker("<|start_header_id|>");
                text(m.role);
                marker("<|end_header_id|>");
                text("\n\n" + trim(m.content));
                marker("<|eot_id|>");
            }
            marker("<|start_header_id|>");
            text("assistant");
            marker("<|end_header_id|>");
            text("\n\n");
            break;
        case ChatFormat::ChatML:
            if (!default_system_.empty() && messages[0].role != "system") {
                marker("<|im_start|>");
                text("system\n" + default_system_);
                marker("<|im_end|>");
                text("\n");
            }
            for (const auto& m : messages) {
                marker("<|im_start|>");
                text(m.role + "\n" + m.content);
                marker("<|im_end|>");
                text("\n");
            }
            marker("<|im_start|>");
            text("assistant\n");
            break;
    }
    return out;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages) const {
    std::string out;
    for (const auto& p : render_parts(messages))
        out += p.text;
    return out;
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tok,
                                          const std::vector<ChatMessage>& messages) const {
    std::vector<int32_t> ids;
    if (tok.add_bos_default() && tok.bos() >= 0) ids.push_back(tok.bos());
    std::string pending;  // text between two markers, encoded as one fragment
    auto flush = [&] {
        if (pending.empty()) return;
        const auto t = tok.encode(pending, false, false);
        ids.insert(ids.end(), t.begin(), t.end());
        pending.clear();
    };
    for (const auto& p : render_parts(messages)) {
        if (!p.marker) {
            pending += p.text;
            continue;
        }
        flush();
        const int32_t id = tok.find_token(p.text);
        if (id < 0) throw Error("the vocabulary has no " + p.text + " token");
        ids.push_back(id);
    }
    flush();
    return ids;
}

}  // namespace llada::tokenizer
