// libFuzzer target: a Hugging Face directory's JSON files as the loader reads them. The input is
// tokenizer.json, then optionally a NUL byte and tokenizer_config.json, then optionally another
// NUL and config.json (default {}). They go through hf_tokenizer_to_gguf into GGUF metadata, that
// through the GGUF reader into a Tokenizer, which then encodes and decodes a fixed text. Every
// rejection must be a llada::Error; a crash, a sanitizer report or another exception is a
// finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "format/hf_directory.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace llada;
    const std::string in(reinterpret_cast<const char*>(data), size);
    std::string parts[3] = {"", "", "{}"};
    size_t at = 0;
    for (int i = 0; i < 3 && at <= in.size(); ++i) {
        const size_t nul = in.find('\0', at);
        parts[i] = in.substr(at, nul == std::string::npos ? std::string::npos : nul - at);
        if (nul == std::string::npos) break;
        at = nul + 1;
    }
    try {
        auto dir = format::HfDirectory::from_json("fuzz", parts[2].empty() ? "{}" : parts[2],
                                                  parts[0], parts[1]);
        format::GgufWriter w;
        w.set_string("general.architecture", "llada");
        // Vocabularies past a million ids are refused here: the fuzzer would spend its time
        // allocating them, and the loader's own limits are tested elsewhere. Without a
        // vocab_size the largest id sets the table's size, so an id past a million is too (ids
        // from 2^24 on the loader refuses before allocating: those go through).
        const auto& cfg = dir->config();
        if (cfg.contains("vocab_size") && cfg["vocab_size"].is_number_integer() &&
            cfg["vocab_size"].get<int64_t>() > (1 << 20))
            return 0;
        const auto huge = [](const nlohmann::json& id) {
            return id.is_number_integer() && id.get<int64_t>() > (1 << 20) &&
                   id.get<int64_t>() < (1 << 24);
        };
        const auto& tj = dir->tokenizer();
        if (tj.is_object()) {
            if (const auto a = tj.find("added_tokens"); a != tj.end() && a->is_array()) {
                for (const auto& t : *a) {
                    if (t.is_object() && t.contains("id") && huge(t["id"])) return 0;
                }
            }
            if (const auto m = tj.find("model"); m != tj.end() && m->is_object()) {
                if (const auto v = m->find("vocab"); v != m->end() && v->is_object()) {
                    for (const auto& e : v->items()) {
                        if (huge(e.value())) return 0;
                    }
                }
            }
        }
        tokenizer::hf_tokenizer_to_gguf(
            *dir,
            cfg.contains("vocab_size") && cfg["vocab_size"].is_number_integer()
                ? cfg["vocab_size"].get<int64_t>()
                : 0,
            true, w);
        const std::vector<uint8_t> bytes = w.to_bytes();
        auto f = format::GgufFile::from_memory(bytes.data(), bytes.size(), "fuzz.gguf");
        auto tok = tokenizer::Tokenizer::from_gguf(*f);
        const auto ids = tok.encode("Hello 123 <|endoftext|> caf\xc3\xa9", true, true);
        (void)tok.decode(ids, true);
    } catch (const Error&) {
    }
    return 0;
}
