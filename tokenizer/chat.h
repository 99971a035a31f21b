// Chat formats: the prompt text a model's chat template makes of a conversation.
//
// A model file carries its template as Jinja text (GGUF `tokenizer.chat_template`, or
// `chat_template` in a Hugging Face tokenizer_config.json). Like llama.cpp, llada.cpp does not
// run Jinja: it recognises the format from marker strings in the text and renders that format
// itself. Recognised (docs/chat-templates.md):
//  - llama3: LLaMA-3 headers, as LLaDA-8B-Instruct declares them (`<|start_header_id|>` and
//    `<|end_header_id|>` in the text). Each message is `<|start_header_id|>ROLE<|end_header_id|>`,
//    a blank line, the content with surrounding whitespace trimmed, `<|eot_id|>`.
//  - chatml: `<|im_start|>` in the text (Dream, Qwen2). Each message is `<|im_start|>ROLE`, a
//    newline, the content, `<|im_end|>` and a newline. When the text carries a literal default
//    system message (Qwen2's "You are a helpful assistant."), it is put first unless the
//    conversation starts with its own system message.
//  - plain: the identity template `{% for message in messages %}{{ message['content'] }}
//    {% endfor %}` (the shipped tiny models and the synthetic benchmark models): the contents,
//    concatenated, and no assistant prefix.
// The BOS token is not part of the text: the tokenizer adds it as the file says.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace llada::tokenizer {

class Tokenizer;

struct ChatMessage {
    std::string role;  // "system", "user" or "assistant"
    std::string content;
};

enum class ChatFormat { Plain, Llama3, ChatML };

// A piece of a rendered chat: the format's own markers (special tokens such as <|eot_id|>) and
// everything else (roles, newlines, contents). Encoding markers as special tokens and the rest
// as plain text keeps a message that contains a marker's text from forging a turn.
struct ChatPart {
    std::string text;
    bool marker = false;
};

class ChatTemplate {
  public:
    // Recognises a template's text; throws llada::Error when it is empty ("the model declares no
    // chat format") or not one of the supported formats (naming its start and the supported ones).
    static ChatTemplate from_text(std::string_view text);
    // The tokenizer's template (from the model file), with its special tokens checked against the
    // vocabulary: a format whose markers are not single tokens there is refused.
    static ChatTemplate from_tokenizer(const Tokenizer& tok);

    ChatFormat format() const { return format_; }
    const char* name() const;
    const std::string& default_system() const { return default_system_; }

    // The prompt for `messages` followed by the assistant's prefix (generation prompt). Throws
    // llada::Error on an empty conversation or a role other than system, user or assistant.
    std::string render(const std::vector<ChatMessage>& messages) const;
    // The same text in pieces (concatenated, exactly render()'s).
    std::vector<ChatPart> render_parts(const std::vector<ChatMessage>& messages) const;
    // The prompt's token ids: the markers as their special tokens, the text between them encoded
    // with special-token parsing off (so "<|im_end|>" typed in a message stays text), BOS first
    // when the tokenizer adds one. Equal to encoding render() with special tokens parsed
    // whenever no message contains a marker's text (tested).
    std::vector<int32_t> encode(const Tokenizer& tok,
                                const std::vector<ChatMessage>& messages) const;

  private:
    ChatFormat format_ = ChatFormat::Plain;
    std::string default_system_;
};

// "llama3 (LLaMA-3 headers: LLaDA), chatml (Dream, Qwen2), plain (the identity template)".
const char* supported_chat_formats();

}  // namespace llada::tokenizer
