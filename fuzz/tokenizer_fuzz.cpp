// libFuzzer target: the tokenizer on arbitrary bytes. The first byte picks one of several
// vocabularies (built once, each a pre-type of llama.cpp's with byte tokens, a few merges and
// special tokens) and whether special tokens are parsed; the rest is the text. Checked
// properties: encoding never fails, every id is in the vocabulary, decoding gives the bytes back
// exactly (byte-level BPE loses nothing, invalid UTF-8 included), and the streaming decoder's
// output, fed the same ids, is valid UTF-8 after flush.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

using namespace llada;

struct Vocab {
    std::vector<uint8_t> bytes;  // the GGUF, kept alive for the tokenizer's views
    std::unique_ptr<format::GgufFile> file;
    std::unique_ptr<tokenizer::Tokenizer> tok;
};

Vocab make_vocab(const char* pre) {
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (int b = 0; b < 256; ++b) {
        tokens.push_back(tokenizer::gpt2_encode(std::string(1, static_cast<char>(b))));
        types.push_back(1);
    }
    std::vector<std::string> merges;
    for (const char* pair : {"t h", "th e", "i n", "e r", "a n", "Ġ t", "Ġt he", "o n", "r e",
                             "1 2", "12 3", "Ġ a", "e s", "in g"}) {
        const std::string p(pair);
        const auto sp = p.find(' ');
        merges.push_back(p);
        tokens.push_back(p.substr(0, sp) + p.substr(sp + 1));
        types.push_back(1);
    }
    for (const char* special : {"<|im_start|>", "<|im_end|>", "<|eot_id|>", "<|mask|>"}) {
        tokens.push_back(special);
        types.push_back(3);  // CONTROL
    }
    tokens.push_back("<tool>");  // USER_DEFINED: cut out even without parse_special
    types.push_back(4);
    format::GgufWriter w;
    w.set_string("general.architecture", "llada");
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", pre);
    w.set_array_string("tokenizer.ggml.tokens", tokens);
    w.set_array_i32("tokenizer.ggml.token_type", types);
    w.set_array_string("tokenizer.ggml.merges", merges);
    Vocab v;
    v.bytes = w.to_bytes();
    v.file = format::GgufFile::from_memory(v.bytes.data(), v.bytes.size(), pre);
    v.tok = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_gguf(*v.file));
    return v;
}

bool valid_utf8(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        const int n = c < 0x80         ? 1
                      : (c >> 5) == 6  ? 2
                      : (c >> 4) == 14 ? 3
                      : (c >> 3) == 30 ? 4
                                       : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (int k = 1; k < n; ++k) {
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
        }
        i += n;
    }
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const char* kPre[] = {"default",      "gpt-2",          "llama-bpe", "qwen2",
                                 "deepseek-llm", "deepseek-coder", "starcoder", "falcon"};
    static std::vector<Vocab> vocabs = [] {
        std::vector<Vocab> v;
        for (const char* p : kPre)
            v.push_back(make_vocab(p));
        return v;
    }();
    if (size == 0) return 0;
    const Vocab& v = vocabs[data[0] % vocabs.size()];
    const bool special = (data[0] / vocabs.size()) % 2 == 1;
    const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
    const auto ids = v.tok->encode(text, false, special);
    for (const int32_t id : ids) {
        if (id < 0 || id >= v.tok->n_vocab()) std::abort();
    }
    // Control tokens decode to their text with special = true, which is the text they came from.
    if (v.tok->decode(ids, true) != text) std::abort();
    tokenizer::StreamDecoder sd(*v.tok, true);
    std::string streamed;
    for (const int32_t id : ids)
        streamed += sd.feed(id);
    streamed += sd.flush();
    if (!valid_utf8(streamed)) std::abort();
    return 0;
}
