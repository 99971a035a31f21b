// Scalar conversions between float32 and the 16-bit float formats (IEEE fp16, bfloat16).
#pragma once

#include <cstdint>
#include <cstring>

namespace llada::quant {

// float32 -> fp16, round to nearest even; overflow gives inf, NaN stays NaN.
inline uint16_t fp32_to_fp16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t abs = x & 0x7fffffffu;
    if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
    if (abs < 0x38800000u) {
        // Subnormal or zero in fp16: scale so the fp16 subnormal unit (2^-24) becomes 1.0 and let
        // the float adder round to nearest even.
        float a;
        std::memcpy(&a, &abs, 4);
        float r = a * 16777216.0f;  // 2^24
        // Values below 2^-25 round to zero; the addition trick rounds the rest correctly.
        uint32_t q = static_cast<uint32_t>(r);
        float frac = r - static_cast<float>(q);
        if (frac > 0.5f || (frac == 0.5f && (q & 1u))) ++q;
        return static_cast<uint16_t>(sign | q);
    }
    // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even.
    uint32_t m = abs - 0x38000000u;  // exponent bias 127 -> 15
    uint32_t lsb = (m >> 13) & 1u;
    m += 0x0fffu + lsb;
    return static_cast<uint16_t>(sign | (m >> 13));
}

inline float fp16_to_fp32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    uint32_t x;
    if (exp == 0) {
        if (man == 0) {
            x = sign;
        } else {
            float f = static_cast<float>(man) * (1.0f / 16777216.0f);  // man * 2^-24
            std::memcpy(&x, &f, 4);
            x |= sign;
        }
    } else if (exp == 31) {
        x = sign | 0x7f800000u | (man << 13);
    } else {
        x = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

// float32 -> bfloat16, round to nearest even; NaN stays NaN.
inline uint16_t fp32_to_bf16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
}

inline float bf16_to_fp32(uint16_t h) {
    uint32_t x = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

// The float32 value nearest to `f` that fp16 / bf16 can represent.
inline float round_to_fp16(float f) {
    return fp16_to_fp32(fp32_to_fp16(f));
}
inline float round_to_bf16(float f) {
    return bf16_to_fp32(fp32_to_bf16(f));
}

}  // namespace llada::quant
