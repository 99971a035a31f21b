// UTF-8 scanning and the GPT-2 byte<->unicode alphabet that byte-level BPE vocabularies are written
// in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace llada::tokenizer {

// Byte-level BPE vocabularies store every token as text over a 256-character alphabet: each byte
// is shown as one printable code point (GPT-2's bytes_to_unicode), so that tokens never contain
// spaces or control characters. Printable Latin-1 bytes stand for themselves; the other 68 bytes
// are moved to U+0100..U+0143 in byte order (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A).
uint32_t gpt2_byte_to_codepoint(uint8_t byte);
// The byte a code point of the alphabet stands for, or -1 when it is not in the alphabet.
int gpt2_codepoint_to_byte(uint32_t cp);

// Raw bytes -> alphabet text (UTF-8).
std::string gpt2_encode(std::string_view raw);
// Alphabet text -> raw bytes. Returns false (leaving `out` unspecified) when `text` is not valid
// UTF-8 or holds a character outside the alphabet.
bool gpt2_decode(std::string_view text, std::string& out);

// Appends the UTF-8 encoding of `cp` (which must be a Unicode scalar value).
void append_utf8(std::string& out, uint32_t cp);

// The UTF-8 replacement character U+FFFD, emitted for bytes that cannot form a character.
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// What the bytes at the start of a buffer hold.
struct Utf8Step {
    enum Kind {
        kComplete,    // one whole, valid character of `len` bytes
        kIncomplete,  // all `len` bytes (the whole buffer) are a valid start of a longer character
        kInvalid,     // `len` >= 1 bytes that can never begin a valid character (a maximal subpart)
    };
    Kind kind;
    size_t len;
};

// Classifies the first character of `p[0..n)`, n >= 1, under the strict rules of RFC 3629 (no
// overlong forms, no surrogates, nothing above U+10FFFF). Invalid input is reported as the
// "maximal subpart" Unicode recommends replacing with a single U+FFFD.
Utf8Step utf8_step(const unsigned char* p, size_t n);

}  // namespace llada::tokenizer
