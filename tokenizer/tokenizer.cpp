// Byte-level BPE tokenizer (GGUF `tokenizer.ggml.model = gpt2`) with llama.cpp's semantics.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "format/gguf.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace llada::tokenizer {
namespace {

// Texts that llama.cpp treats as end-of-generation tokens and therefore forces to CONTROL,
// whatever type the file gives them. Following it keeps which tokens are cut out of plain text
// (only with parse_special) and which are hidden when decoding identical to llama.cpp.
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
};

// Looked up in this order when the file has no `tokenizer.ggml.eot_token_id`.
constexpr std::string_view kEndOfTurnTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>"};

std::string file_prefix(const format::GgufFile& g) {
    return "GGUF file '" + g.path() + "': ";
}

// A special token id from the metadata: -1 when absent, an error when outside the vocabulary.
int32_t read_special_id(const format::GgufFile& g, std::string_view key, int64_t n_vocab) {
    std::optional<int64_t> v = g.opt_int(key);
    if (!v) return -1;
    if (*v < 0 || *v >= n_vocab) {
        throw Error(file_prefix(g) + "special token id '" + std::string(key) +
                    "' = " + std::to_string(*v) + " is outside the vocabulary of " +
                    std::to_string(n_vocab) + " tokens");
    }
    return static_cast<int32_t>(*v);
}

// The byte of a "<0xXX>" token text, or -1.
int byte_token_value(std::string_view text) {
    if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
    auto hex = [](char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    int hi = hex(text[3]), lo = hex(text[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const format::GgufFile& g) {
    std::optional<std::string_view> model = g.opt_string("tokenizer.ggml.model");
    if (!model) {
        throw Error(file_prefix(g) +
                    "has no tokenizer (metadata key 'tokenizer.ggml.model' is missing)");
    }
    if (*model != "gpt2") {
        throw Error(file_prefix(g) + "tokenizer model '" + std::string(*model) +
                    "' (tokenizer.ggml.model) is not supported; only byte-level BPE ('gpt2') is");
    }
    std::string pre_name(g.opt_string("tokenizer.ggml.pre").value_or("default"));
    const PreTypeSpec* spec = find_pre_type(pre_name);
    if (!spec) {
        throw Error(file_prefix(g) + "pre-tokenizer '" + pre_name +
                    "' (tokenizer.ggml.pre) is not supported; supported: " + supported_pre_types());
    }

    std::vector<std::string_view> tokens = g.get_string_array("tokenizer.ggml.tokens");
    if (tokens.empty()) throw Error(file_prefix(g) + "'tokenizer.ggml.tokens' is empty");
    if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
        throw Error(file_prefix(g) + "'tokenizer.ggml.tokens' has too many tokens (" +
                    std::to_string(tokens.size()) + ")");
    }
    if (!g.find("tokenizer.ggml.merges")) {
        throw Error(file_prefix(g) +
                    "byte-level BPE vocabulary without merges (metadata key "
                    "'tokenizer.ggml.merges' is missing)");
    }
    std::vector<std::string_view> merges = g.get_string_array("tokenizer.ggml.merges");
    const auto n = static_cast<int64_t>(tokens.size());

    Tokenizer t(Bpe(tokens, merges, "GGUF file '" + g.path() + "'"), PreTokenizer(*spec), spec);
    t.pre_name_ = pre_name;

    t.types_.assign(tokens.size(), TokenType::kNormal);
    if (g.find("tokenizer.ggml.token_type")) {
        std::vector<int64_t> types = g.get_int_array("tokenizer.ggml.token_type");
        if (types.size() != tokens.size()) {
            throw Error(file_prefix(g) + "'tokenizer.ggml.token_type' has " +
                        std::to_string(types.size()) + " entries for " +
                        std::to_string(tokens.size()) + " tokens");
        }
        for (size_t i = 0; i < tokens.size(); ++i) {
            if (types[i] < 0 || types[i] > static_cast<int64_t>(TokenType::kByte)) {
                throw Error(file_prefix(g) + "token " + std::to_string(i) + " has type " +
                            std::to_string(types[i]) +
                            " in 'tokenizer.ggml.token_type' (valid types are 0..6)");
            }
            t.types_[i] = static_cast<TokenType>(types[i]);
        }
    }
    for (std::string_view text : kEndOfGenerationTexts) {
        int32_t id = t.bpe_.find(text);
        if (id >= 0) t.types_[id] = TokenType::kControl;
    }

    t.bos_ = read_special_id(g, "tokenizer.ggml.bos_token_id", n);
    t.eos_ = read_special_id(g, "tokenizer.ggml.eos_token_id", n);
    t.eot_ = read_special_id(g, "tokenizer.ggml.eot_token_id", n);
    t.pad_ = read_special_id(g, "tokenizer.ggml.padding_token_id", n);
    t.mask_ = read_special_id(g, "tokenizer.ggml.mask_token_id", n);
    for (size_t k = 0; t.eot_ < 0 && k < std::size(kEndOfTurnTexts); ++k) {
        t.eot_ = t.bpe_.find(kEndOfTurnTexts[k]);
    }
    t.add_bos_ = g.opt_bool("tokenizer.ggml.add_bos_token").value_or(spec->add_bos);
    t.chat_template_ = std::string(g.opt_string("tokenizer.chat_template").value_or(""));

    for (int32_t id = 0; id < static_cast<int32_t>(n); ++id) {
        TokenType ty = t.types_[id];
        bool special =
            ty == TokenType::kControl || ty == TokenType::kUserDefined || ty == TokenType::kUnknown;
        // An empty text would match everywhere; llama.cpp renames such tokens "[EMPTY_<id>]",
        // which never occurs in real text either.
        if (special && !t.bpe_.text(id).empty()) t.specials_.push_back(id);
    }
    // Longest first, so that a token containing another wins; ties by id to stay deterministic.
    std::stable_sort(t.specials_.begin(), t.specials_.end(), [&](int32_t a, int32_t b) {
        return t.bpe_.text(a).size() > t.bpe_.text(b).size();
    });
    return t;
}

void Tokenizer::check_id(int32_t id) const {
    if (id < 0 || id >= n_vocab()) {
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary of " +
                    std::to_string(n_vocab()) + " tokens");
    }
}

std::string_view Tokenizer::token_text(int32_t id) const {
    check_id(id);
    return bpe_.text(id);
}

TokenType Tokenizer::token_type(int32_t id) const {
    check_id(id);
    return types_[id];
}

void Tokenizer::partition(std::string_view text, bool parse_special,
                          std::vector<Fragment>& out) const {
    out.clear();
    if (text.empty()) return;
    out.push_back({-1, text});
    if (specials_.empty()) return;

    // Vocabularies can have thousands of added tokens (deepseek-llm has ~2,400 "[PADn]"), and
    // searching the text for each one dominated encoding. Every byte pair of a token that occurs
    // must occur in the text, so a bitmap of the text's byte pairs rules out most tokens at once.
    std::vector<uint64_t> pairs(65536 / 64, 0);
    std::vector<bool> bytes(256, false);
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    for (size_t i = 0; i < text.size(); ++i) {
        bytes[p[i]] = true;
        if (i + 1 < text.size()) {
            unsigned k = (unsigned{p[i]} << 8) | p[i + 1];
            pairs[k >> 6] |= uint64_t{1} << (k & 63);
        }
    }
    auto may_occur = [&](std::string_view needle) {
        const auto* q = reinterpret_cast<const unsigned char*>(needle.data());
        if (needle.size() == 1) return bool(bytes[q[0]]);
        for (size_t i = 0; i + 1 < needle.size(); ++i) {
            unsigned k = (unsigned{q[i]} << 8) | q[i + 1];
            if (!(pairs[k >> 6] >> (k & 63) & 1)) return false;
        }
        return true;
    };

    std::vector<Fragment> next;
    for (int32_t id : specials_) {
        TokenType ty = types_[id];
        if (!parse_special && (ty == TokenType::kControl || ty == TokenType::kUnknown)) continue;
        std::string_view needle = bpe_.text(id);
        if (needle.size() > text.size() || !may_occur(needle)) continue;
        // Rebuild the list only for tokens that really occur in what is left of the text.
        bool found = false;
        for (const auto& f : out) {
            if (f.token < 0 && f.text.find(needle) != std::string_view::npos) {
                found = true;
                break;
            }
        }
        if (!found) continue;
        next.clear();
        for (const auto& f : out) {
            if (f.token >= 0) {
                next.push_back(f);
                continue;
            }
            size_t pos = 0;
            for (size_t at; (at = f.text.find(needle, pos)) != std::string_view::npos;) {
                if (at > pos) next.push_back({-1, f.text.substr(pos, at - pos)});
                next.push_back({id, {}});
                pos = at + needle.size();
            }
            if (pos < f.text.size()) next.push_back({-1, f.text.substr(pos)});
        }
        out.swap(next);
    }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 2);
    if (add_bos && bos_ >= 0) ids.push_back(bos_);

    std::vector<Fragment> fragments;
    partition(text, parse_special, fragments);
    std::vector<std::string_view> words;
    Bpe::Scratch scratch;
    for (const auto& f : fragments) {
        if (f.token >= 0) {
            ids.push_back(f.token);
            continue;
        }
        pre_.split(f.text, words);
        for (std::string_view w : words)
            bpe_.encode_word(w, spec_->ignore_merges, scratch, ids);
    }
    return ids;
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
    check_id(id);
    std::string_view text = bpe_.text(id);
    switch (types_[id]) {
        case TokenType::kControl:
        case TokenType::kUnknown:
            return special ? std::string(text) : std::string();
        case TokenType::kUserDefined:
            // Added tokens are stored as plain text, not in the byte alphabet.
            return std::string(text);
        case TokenType::kUnused:
        case TokenType::kUndefined:
            return {};
        case TokenType::kByte: {
            int b = byte_token_value(text);
            if (b >= 0) return std::string(1, static_cast<char>(b));
            break;  // not spelled "<0xXX>": decode it like a normal token
        }
        case TokenType::kNormal:
            break;
    }
    std::string raw;
    // A text with characters outside the alphabet is given as it is, like HF's ByteLevel
    // decoder does (llama.cpp would insert an "[UNK_BYTE_...]" marker).
    if (!gpt2_decode(text, raw)) return std::string(text);
    return raw;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool special) const {
    std::string out;
    for (int32_t id : ids)
        out += token_to_piece(id, special);
    return out;
}

std::string StreamDecoder::feed(int32_t id) {
    pending_ += tokenizer_->token_to_piece(id, special_);
    std::string out;
    const auto* p = reinterpret_cast<const unsigned char*>(pending_.data());
    size_t i = 0;
    while (i < pending_.size()) {
        Utf8Step st = utf8_step(p + i, pending_.size() - i);
        if (st.kind == Utf8Step::kIncomplete) break;  // wait for the rest of the character
        if (st.kind == Utf8Step::kComplete) {
            out.append(pending_, i, st.len);
        } else {
            out += kReplacementChar;
        }
        i += st.len;
    }
    pending_.erase(0, i);
    return out;
}

std::string StreamDecoder::flush() {
    if (pending_.empty()) return {};
    pending_.clear();
    return std::string(kReplacementChar);
}

}  // namespace llada::tokenizer
