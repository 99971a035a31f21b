// Pre-tokenizers of byte-level BPE vocabularies: llama.cpp's pre-type names, their regexes, the
// split.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace llada::tokenizer {

// How one family of vocabularies is pre-tokenized and what it defaults to.
struct PreTypeSpec {
    // The family, named after llama.cpp's LLAMA_VOCAB_PRE_TYPE_* it reproduces (e.g. "gpt2").
    std::string_view family;
    // Applied in order; see PreTokenizer::split.
    std::span<const std::string_view> regexes;
    // A pre-tokenized word that is itself a token is emitted as that token without running the
    // merges (HF's `ignore_merges`, set by the Llama-3 tokenizer).
    bool ignore_merges = false;
    // Whether a BOS token is added when the GGUF does not say (`tokenizer.ggml.add_bos_token`).
    bool add_bos = false;
};

// The spec for a `tokenizer.ggml.pre` value, or nullptr when the name is not supported.
const PreTypeSpec* find_pre_type(std::string_view name);
// Every supported `tokenizer.ggml.pre` value, comma-separated, for error messages.
std::string supported_pre_types();
// The `tokenizer.ggml.pre` name whose regexes are exactly `regexes`, in order (a tokenizer.json's
// Split patterns, with GPT-2's own pattern when its ByteLevel step splits too), the first name
// the table gives that family ("llama-bpe", "qwen2", "gpt-2", ...); "" when no family matches.
std::string pre_type_for_regexes(std::span<const std::string> regexes);

// A compiled pre-tokenizer. Regexes run in PCRE2's UTF mode with Unicode properties (UCP), so
// \p{L}, \p{N}, \p{P} are the real general categories. `\s` is rewritten to Unicode's White_Space
// property (what HF tokenizers' Oniguruma and Rust regex use; PCRE2's own \s differs on U+180E).
// Bytes that are not valid UTF-8 never match any regex item, so they end up in the gaps between
// matches and are still byte-level encoded by the BPE that follows.
class PreTokenizer {
  public:
    explicit PreTokenizer(const PreTypeSpec& spec);
    ~PreTokenizer();
    PreTokenizer(PreTokenizer&&) noexcept;
    PreTokenizer& operator=(PreTokenizer&&) noexcept;

    // Splits `text` into consecutive non-empty pieces that cover it exactly. Each regex in turn
    // splits every current piece into its matches and the gaps between them, keeping both, in
    // order; a regex sees one piece at a time, so anchors and look-arounds stop at its edges.
    // The pieces point into `text`.
    void split(std::string_view text, std::vector<std::string_view>& out) const;

  private:
    struct Regex;
    std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace llada::tokenizer
