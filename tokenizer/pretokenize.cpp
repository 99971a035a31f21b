// Pre-tokenizers of byte-level BPE vocabularies: llama.cpp's pre-type names, their regexes, the
// split.
#include "tokenizer/pretokenize.h"

#include <algorithm>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cassert>
#include <utility>

#include "tokenizer/unicode.h"
#include "util/error.h"

namespace llada::tokenizer {
namespace {

// The regexes are those of llama.cpp's llm_tokenizer_bpe, which in turn transcribe each model's
// HF tokenizer.json. Where llama.cpp rewrote a case-insensitive group as [sS] alternatives for its
// std::regex fallback, the original (?i:...) is used: PCRE2 handles it, and HF is what the model
// was trained with.

// GPT-2's pattern, also the core of several others.
constexpr std::string_view kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

constexpr std::string_view kDefaultRegexes[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    kGpt2,
    "\\p{N}+",
    "[0-9][0-9][0-9]",
};
constexpr PreTypeSpec kDefault{"default", kDefaultRegexes};

constexpr std::string_view kGpt2Regexes[] = {kGpt2};
constexpr PreTypeSpec kGpt2Spec{"gpt2", kGpt2Regexes};

constexpr std::string_view kLlama3Regexes[] = {
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
constexpr PreTypeSpec kLlama3{"llama3", kLlama3Regexes, /*ignore_merges=*/true, /*add_bos=*/true};
// Llama-3's regex without its merge and BOS rules.
constexpr PreTypeSpec kDbrx{"dbrx", kLlama3Regexes};

constexpr std::string_view kQwen2Regexes[] = {
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
constexpr PreTypeSpec kQwen2{"qwen2", kQwen2Regexes};
// Ling / Bailing (LLaDA-MoE, LLaDA 2.x): Qwen2's split with the contractions written as one
// case-insensitive group and a newline run ending at its last newline. (llama.cpp also turns
// its clean-up of spaces off for these names; this decoder never cleans spaces.)
constexpr std::string_view kBailingRegexes[] = {
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
};
constexpr PreTypeSpec kBailing{"bailingmoe", kBailingRegexes};

// The deepseek classes list code points by number: an editor that normalises Unicode (NFC turns
// U+212A KELVIN SIGN into 'K' and U+1F7D into U+03CE) would otherwise silently break the ranges.
constexpr std::string_view kDeepseekLlmRegexes[] = {
    "[\\r\\n]",
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"
    "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"
    "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"
    "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"
    "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}"
    "\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}"
    "\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"
    "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"
    "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"
    "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"
    "\\x{1E900}-\\x{1E943}]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
    "\\p{N}+",
};
constexpr PreTypeSpec kDeepseekLlm{"deepseek-llm", kDeepseekLlmRegexes};

// clang-format off
constexpr std::string_view kDeepseekCoderRegexes[] = {
    "[\\r\\n]",
    "\\s?\\p{L}+",
    "\\s?\\p{P}+",
    "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
    "\\p{N}",
};
// clang-format on
constexpr PreTypeSpec kDeepseekCoder{"deepseek-coder", kDeepseekCoderRegexes};

constexpr std::string_view kFalconRegexes[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    kGpt2,
    "[0-9][0-9][0-9]",
};
constexpr PreTypeSpec kFalcon{"falcon", kFalconRegexes};

constexpr std::string_view kStarcoderRegexes[] = {"\\p{N}", kGpt2};
constexpr PreTypeSpec kStarcoder{"starcoder", kStarcoderRegexes};

// `tokenizer.ggml.pre` values, grouped by the family llama.cpp maps them to. Only names whose
// whole behaviour is the family's regexes and flags are listed; names that llama.cpp also gives
// special-token or normalisation quirks are left out rather than half-supported.
struct PreTypeName {
    std::string_view name;
    const PreTypeSpec* spec;
};

constexpr PreTypeName kPreTypeNames[] = {
    {"default", &kDefault},
    {"gpt-2", &kGpt2Spec},
    {"phi-2", &kGpt2Spec},
    {"mpt", &kGpt2Spec},
    {"olmo", &kGpt2Spec},
    {"jais", &kGpt2Spec},
    {"exaone4", &kGpt2Spec},
    {"trillion", &kGpt2Spec},
    {"granite-docling", &kGpt2Spec},
    {"gigachat", &kGpt2Spec},
    {"a.x-4.0", &kGpt2Spec},
    {"mellum", &kGpt2Spec},
    {"llama-bpe", &kLlama3},
    {"llama3", &kLlama3},
    {"llama-v3", &kLlama3},
    {"falcon3", &kLlama3},
    {"falcon-h1", &kLlama3},
    {"pixtral", &kLlama3},
    {"midm-2.0", &kLlama3},
    {"lfm2", &kLlama3},
    {"dbrx", &kDbrx},
    {"smaug-bpe", &kDbrx},
    {"qwen2", &kQwen2},
    {"deepseek-r1-qwen", &kQwen2},
    {"kormo", &kQwen2},
    {"f2llmv2", &kQwen2},
    {"megrez", &kQwen2},
    {"stablelm2", &kQwen2},
    {"hunyuan", &kQwen2},
    {"bailingmoe", &kBailing},
    {"bailingmoe2", &kBailing},
    {"llada-moe", &kBailing},
    {"deepseek-llm", &kDeepseekLlm},
    {"deepseek-coder", &kDeepseekCoder},
    {"falcon", &kFalcon},
    {"starcoder", &kStarcoder},
    {"refact", &kStarcoder},
    {"command-r", &kStarcoder},
    {"smollm", &kStarcoder},
    {"codeshell", &kStarcoder},
    {"exaone", &kStarcoder},
    {"minerva-7b", &kStarcoder},
    {"mellum2", &kStarcoder},
};

// Unicode's White_Space property as the body of a character class. PCRE2's UCP \s lacks U+0085
// in some versions and includes U+180E (no longer a space since Unicode 6.3); HF does neither.
constexpr std::string_view kWhiteSpaceBody = "\\x{09}-\\x{0D}\\x{20}\\x{85}\\p{Z}";

// Replaces \s and \S by explicit White_Space classes, inside and outside [...].
std::string expand_whitespace(std::string_view pattern) {
    std::string out;
    out.reserve(pattern.size() + 64);
    bool in_class = false;
    for (size_t i = 0; i < pattern.size(); ++i) {
        char c = pattern[i];
        if (c == '\\' && i + 1 < pattern.size()) {
            char e = pattern[++i];
            if (e == 's') {
                if (in_class) {
                    out += kWhiteSpaceBody;
                } else {
                    out += '[';
                    out += kWhiteSpaceBody;
                    out += ']';
                }
            } else if (e == 'S') {
                // A negated set cannot be spliced into another class; no pattern needs it.
                assert(!in_class);
                out += "[^";
                out += kWhiteSpaceBody;
                out += ']';
            } else {
                out += c;
                out += e;
            }
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
        } else if (c == ']' && in_class) {
            in_class = false;
        }
        out += c;
    }
    return out;
}

std::string pcre2_message(int code) {
    PCRE2_UCHAR buf[256];
    int n = pcre2_get_error_message(code, buf, sizeof(buf));
    return n > 0 ? std::string(reinterpret_cast<const char*>(buf), static_cast<size_t>(n))
                 : "PCRE2 error " + std::to_string(code);
}

}  // namespace

const PreTypeSpec* find_pre_type(std::string_view name) {
    for (const auto& n : kPreTypeNames) {
        if (n.name == name) return n.spec;
    }
    return nullptr;
}

std::string supported_pre_types() {
    std::string out;
    for (const auto& n : kPreTypeNames) {
        if (!out.empty()) out += ", ";
        out += n.name;
    }
    return out;
}

std::string pre_type_for_regexes(std::span<const std::string> regexes) {
    for (const auto& n : kPreTypeNames) {
        const auto& r = n.spec->regexes;
        if (r.size() == regexes.size() && std::equal(r.begin(), r.end(), regexes.begin()))
            return std::string(n.name);
    }
    return "";
}

struct PreTokenizer::Regex {
    pcre2_code* code = nullptr;
    bool jit = false;
    ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const PreTypeSpec& spec) {
    for (std::string_view source : spec.regexes) {
        std::string pattern = expand_whitespace(source);
        int err = 0;
        PCRE2_SIZE err_offset = 0;
        // DOLLAR_ENDONLY: `$` means the end of the piece, never "before a final newline".
        // MATCH_INVALID_UTF: text need not be valid UTF-8; bad bytes simply never match.
        uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY;
        auto re = std::make_unique<Regex>();
        re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 options, &err, &err_offset, nullptr);
        if (!re->code) {
            // The patterns are fixed in this file, so this is a build problem (e.g. a PCRE2
            // without Unicode support), reported rather than asserted.
            throw Error("pre-tokenizer '" + std::string(spec.family) + "': PCRE2 cannot compile '" +
                        pattern + "' at offset " + std::to_string(err_offset) + ": " +
                        pcre2_message(err));
        }
        // JIT makes splitting several times faster; without it the interpreter gives the same
        // results.
        re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
        regexes_.push_back(std::move(re));
    }
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
    out.clear();
    if (text.empty()) return;
    out.push_back(text);
    std::vector<std::string_view> next;
    // One match data for the whole call keeps split() usable from several threads at once.
    std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
        pcre2_match_data_create(1, nullptr), pcre2_match_data_free);
    if (!md) throw Error("pre-tokenizer: out of memory");

    for (const auto& re : regexes_) {
        next.clear();
        for (std::string_view piece : out) {
            const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
            size_t pos = 0;   // where the next search starts
            size_t kept = 0;  // end of what has been emitted so far
            while (pos < piece.size()) {
                int rc = pcre2_match(re->code, subject, piece.size(), pos, 0, md.get(), nullptr);
                if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && re->jit) {
                    // The JIT's fixed stack can run out on very long runs; the interpreter
                    // keeps its backtracking state on the heap.
                    rc = pcre2_match(re->code, subject, piece.size(), pos, PCRE2_NO_JIT, md.get(),
                                     nullptr);
                }
                if (rc == PCRE2_ERROR_NOMATCH) break;
                if (rc < 0) {
                    throw Error("pre-tokenizer: matching failed on a piece of " +
                                std::to_string(piece.size()) + " bytes: " + pcre2_message(rc));
                }
                const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
                size_t begin = ov[0], end = ov[1];
                if (end == begin) {
                    if (begin >= piece.size()) break;
                    // An empty match produces no piece; step over one character and go on.
                    Utf8Step st =
                        utf8_step(reinterpret_cast<const unsigned char*>(piece.data()) + begin,
                                  piece.size() - begin);
                    pos = begin + (st.kind == Utf8Step::kComplete ? st.len : 1);
                    continue;
                }
                if (begin > kept) next.push_back(piece.substr(kept, begin - kept));
                next.push_back(piece.substr(begin, end - begin));
                kept = end;
                pos = end;
            }
            if (kept < piece.size()) next.push_back(piece.substr(kept));
        }
        out.swap(next);
    }
}

}  // namespace llada::tokenizer
