// Byte-level BPE tokenizer (GGUF `tokenizer.ggml.model = gpt2`) with llama.cpp's semantics.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"

namespace llada::format {
class GgufFile;
}

namespace llada::tokenizer {

// Token types, numbered as in GGUF's `tokenizer.ggml.token_type`.
enum class TokenType : int32_t {
    kUndefined = 0,
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6,
};

// A vocabulary loaded from GGUF metadata. Immutable after loading; every const method may be
// called from several threads at once.
//
// Encoding, in llama.cpp's order:
//  1. Special tokens are cut out of the raw text, longest text first: USER_DEFINED tokens always
//     (HF "added tokens"), CONTROL and UNKNOWN tokens only when `parse_special` is set.
//  2. Every remaining fragment is split by the pre-type's regexes (tokenizer/pretokenize.h).
//  3. Each piece is encoded by byte-level BPE (tokenizer/bpe.h). Any byte string can be encoded,
//     including invalid UTF-8: such bytes are never matched by a regex, so they stay in the gaps
//     between matches and become byte tokens; decoding gives them back unchanged. (llama.cpp
//     would first replace each of them by U+FFFD.)
class Tokenizer {
  public:
    // Throws llada::Error, naming the key or value at fault, when the GGUF has no byte-level BPE
    // vocabulary, an unsupported `tokenizer.ggml.pre` (an absent one means "default", as in
    // llama.cpp), missing or malformed tokens/merges/types, or a special token id outside the
    // vocabulary.
    static Tokenizer from_gguf(const format::GgufFile& gguf);

    Tokenizer(Tokenizer&&) = default;
    Tokenizer& operator=(Tokenizer&&) = default;

    // Token ids for `text` (raw bytes, nothing trimmed or normalised). With `add_bos`, the BOS
    // token is put first when the vocabulary has one.
    std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;
    // Whether the model expects a BOS: `tokenizer.ggml.add_bos_token` when present, otherwise the
    // pre-type's default (true only for the Llama-3 family, as in llama.cpp).
    bool add_bos_default() const { return add_bos_; }

    // The raw bytes a token stands for. CONTROL and UNKNOWN tokens give their text only when
    // `special` is set and "" otherwise; USER_DEFINED tokens always give their text; UNUSED and
    // UNDEFINED tokens give "". A piece may be part of a UTF-8 character. Throws llada::Error for
    // an id outside the vocabulary.
    std::string token_to_piece(int32_t id, bool special) const;
    // The concatenated pieces: raw bytes, not necessarily valid UTF-8 (see StreamDecoder).
    std::string decode(const std::vector<int32_t>& ids, bool special) const;

    int32_t n_vocab() const { return bpe_.n_tokens(); }
    // Special ids, -1 when the vocabulary has none.
    int32_t bos() const { return bos_; }
    int32_t eos() const { return eos_; }
    // End of turn: `tokenizer.ggml.eot_token_id`, else the first of the tokens "<|eot_id|>",
    // "<|im_end|>", "<|end|>" that exists.
    int32_t eot() const { return eot_; }
    int32_t mask() const { return mask_; }  // `tokenizer.ggml.mask_token_id`
    int32_t pad() const { return pad_; }    // `tokenizer.ggml.padding_token_id`

    // The token whose stored text is exactly `text` (normal tokens are stored in the GPT-2
    // alphabet, e.g. "Ġthe"); -1 if none.
    int32_t find_token(std::string_view text) const { return bpe_.find(text); }
    // The stored text of a token.
    std::string_view token_text(int32_t id) const;
    // The type from `tokenizer.ggml.token_type` (NORMAL when absent), except that tokens which
    // llama.cpp recognises as end-of-generation by their text ("<|endoftext|>", "<|im_end|>", ...)
    // are CONTROL whatever the file says, as llama.cpp overrides them.
    TokenType token_type(int32_t id) const;
    bool is_control(int32_t id) const { return token_type(id) == TokenType::kControl; }

    const std::string& chat_template() const { return chat_template_; }  // "" when absent
    // The `tokenizer.ggml.pre` in effect ("default" when the file has none).
    const std::string& pre_type() const { return pre_name_; }
    size_t n_merges() const { return bpe_.n_merges(); }

  private:
    Tokenizer(Bpe bpe, PreTokenizer pre, const PreTypeSpec* spec)
        : bpe_(std::move(bpe)), pre_(std::move(pre)), spec_(spec) {}

    struct Fragment {
        int32_t token;          // >= 0: a special token cut out of the text
        std::string_view text;  // otherwise: raw text still to be tokenized
    };
    // Step 1 of encoding: cuts the special tokens out of `text`.
    void partition(std::string_view text, bool parse_special, std::vector<Fragment>& out) const;
    void check_id(int32_t id) const;

    Bpe bpe_;
    PreTokenizer pre_;
    const PreTypeSpec* spec_;
    std::string pre_name_;
    std::vector<TokenType> types_;
    // CONTROL, USER_DEFINED and UNKNOWN tokens with a non-empty text, longest text first.
    std::vector<int32_t> specials_;
    int32_t bos_ = -1, eos_ = -1, eot_ = -1, mask_ = -1, pad_ = -1;
    bool add_bos_ = false;
    std::string chat_template_;
};

// Turns a stream of token ids into text that never contains a broken UTF-8 character, for
// showing tokens as they are produced. A token may end in the middle of a character (byte-level
// BPE often splits emoji and CJK characters across tokens): those bytes are held back until the
// character is complete. Bytes that can never form a character are replaced by U+FFFD, so the
// output is always valid UTF-8; when the pieces are valid UTF-8, the concatenated output equals
// Tokenizer::decode.
class StreamDecoder {
  public:
    // `tokenizer` must outlive the decoder; `special` is passed to token_to_piece.
    StreamDecoder(const Tokenizer& tokenizer, bool special)
        : tokenizer_(&tokenizer), special_(special) {}

    // Adds one token; returns the text that became complete (possibly "").
    std::string feed(int32_t id);
    // Ends the stream: an incomplete character still held back is emitted as one U+FFFD.
    std::string flush();
    // Bytes currently held back (at most 3).
    size_t pending() const { return pending_.size(); }

  private:
    const Tokenizer* tokenizer_;
    bool special_;
    std::string pending_;
};

}  // namespace llada::tokenizer
