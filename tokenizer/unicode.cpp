// UTF-8 scanning and the GPT-2 byte<->unicode alphabet that byte-level BPE vocabularies are written
// in.
#include "tokenizer/unicode.h"

#include <array>

namespace llada::tokenizer {
namespace {

// Bytes that GPT-2 shows as themselves: '!'..'~', '¡'..'¬' and '®'..'ÿ'.
constexpr bool shown_as_itself(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<uint16_t, 256> make_byte_to_cp() {
    std::array<uint16_t, 256> t{};
    int next = 0;
    for (int b = 0; b < 256; ++b) {
        t[b] = static_cast<uint16_t>(shown_as_itself(b) ? b : 256 + next++);
    }
    return t;
}

// The alphabet's code points all lie below 256 + 68 = 324, so the inverse is a small array.
constexpr int kAlphabetLimit = 256 + 68;

constexpr std::array<int16_t, kAlphabetLimit> make_cp_to_byte() {
    std::array<int16_t, kAlphabetLimit> t{};
    for (auto& v : t)
        v = -1;
    auto fwd = make_byte_to_cp();
    for (int b = 0; b < 256; ++b)
        t[fwd[b]] = static_cast<int16_t>(b);
    return t;
}

constexpr std::array<uint16_t, 256> kByteToCp = make_byte_to_cp();
constexpr std::array<int16_t, kAlphabetLimit> kCpToByte = make_cp_to_byte();

}  // namespace

uint32_t gpt2_byte_to_codepoint(uint8_t byte) {
    return kByteToCp[byte];
}

int gpt2_codepoint_to_byte(uint32_t cp) {
    return cp < kAlphabetLimit ? kCpToByte[cp] : -1;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

std::string gpt2_encode(std::string_view raw) {
    std::string out;
    out.reserve(raw.size() * 2);
    for (unsigned char c : raw)
        append_utf8(out, kByteToCp[c]);
    return out;
}

bool gpt2_decode(std::string_view text, std::string& out) {
    out.clear();
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    size_t n = text.size();
    size_t i = 0;
    while (i < n) {
        // The alphabet needs only 1- and 2-byte UTF-8; anything longer is outside it.
        unsigned char c = p[i];
        uint32_t cp;
        if (c < 0x80) {
            cp = c;
            i += 1;
        } else if ((c & 0xE0) == 0xC0 && c >= 0xC2 && i + 1 < n && (p[i + 1] & 0xC0) == 0x80) {
            cp = ((c & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu);
            i += 2;
        } else {
            return false;
        }
        int b = gpt2_codepoint_to_byte(cp);
        if (b < 0) return false;
        out += static_cast<char>(b);
    }
    return true;
}

Utf8Step utf8_step(const unsigned char* p, size_t n) {
    unsigned char c = p[0];
    if (c < 0x80) return {Utf8Step::kComplete, 1};
    size_t need;
    // The valid range of the second byte depends on the lead byte (RFC 3629, table 3-7 of the
    // Unicode standard); later bytes are plain continuation bytes.
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;  // no overlong 3-byte forms
        if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;  // no overlong 4-byte forms
        if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
        return {Utf8Step::kInvalid, 1};  // continuation byte, C0/C1 or F5..FF
    }
    for (size_t k = 1; k < need; ++k) {
        if (k >= n) return {Utf8Step::kIncomplete, n};
        unsigned char lo_k = k == 1 ? lo : 0x80, hi_k = k == 1 ? hi : 0xBF;
        if (p[k] < lo_k || p[k] > hi_k) return {Utf8Step::kInvalid, k};
    }
    return {Utf8Step::kComplete, need};
}

}  // namespace llada::tokenizer
