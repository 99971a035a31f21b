// libFuzzer target: the chat template recogniser and renderer. The input is split at the first
// NUL: before it the template text, after it the messages' contents (separated by further NULs,
// roles cycling through user, assistant, system). Rejections must be llada::Error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/chat.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace llada;
    const std::string in(reinterpret_cast<const char*>(data), size);
    const size_t cut = in.find('\0');
    const std::string tmpl = in.substr(0, cut);
    std::vector<tokenizer::ChatMessage> msgs;
    if (cut != std::string::npos) {
        static const char* kRoles[] = {"user", "assistant", "system"};
        size_t at = cut + 1;
        for (int i = 0; at <= in.size(); ++i) {
            const size_t end = std::min(in.find('\0', at), in.size());
            msgs.push_back({kRoles[i % 3], in.substr(at, end - at)});
            at = end + 1;
        }
    }
    try {
        const auto t = tokenizer::ChatTemplate::from_text(tmpl);
        (void)t.render(msgs);
    } catch (const Error&) {
    }
    return 0;
}
