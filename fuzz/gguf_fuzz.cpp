// libFuzzer target: the GGUF reader (header, metadata, tensor infos, data bounds) on arbitrary
// bytes, then what reads a parsed file: the model loader (hyper-parameters, tensor names, shapes
// and types; files declaring a context above 2^16 positions are skipped, since their RoPE tables
// are legitimately large), the tokenizer's vocabulary loader and the chat template recogniser.
// Every rejection must be a llada::Error; anything else (a crash, a sanitizer report, another
// exception) is a finding.
#include <cstddef>
#include <cstdint>

#include "format/gguf.h"
#include "model/model.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace llada;
    std::unique_ptr<format::GgufFile> f;
    try {
        f = format::GgufFile::from_memory(data, size, "fuzz.gguf");
    } catch (const Error&) {
        return 0;
    }
    // Every accessor on every entry must answer or throw llada::Error.
    for (const auto& kv : f->kvs()) {
        try {
            (void)f->opt_string(kv.key);
        } catch (const Error&) {
        }
        try {
            (void)f->get_string_array(kv.key);
        } catch (const Error&) {
        }
    }
    try {
        const auto tok = tokenizer::Tokenizer::from_gguf(*f);
        const auto ids = tok.encode("Hello, world! 123 <|im_start|>", true, true);
        (void)tok.decode(ids, true);
        (void)tokenizer::ChatTemplate::from_tokenizer(tok);
    } catch (const Error&) {
    }
    // The loader takes the file; parse it once more for it.
    bool huge = false;
    for (const auto& kv : f->kvs()) {
        if (kv.key.size() > 15 && kv.key.compare(kv.key.size() - 15, 15, ".context_length") == 0) {
            try {
                const auto v = f->opt_uint(kv.key);
                huge = huge || (v && *v > (1u << 16));
            } catch (const Error&) {  // not an integer: the loader names it
            }
        }
    }
    if (!huge) {
        try {
            (void)model::Model::from_gguf(format::GgufFile::from_memory(data, size, "fuzz.gguf"));
        } catch (const Error&) {
        }
    }
    return 0;
}
