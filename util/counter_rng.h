// A counter-based uniform generator: splitmix64 over (seed, index), so any value of a stream can
// be drawn in any order. Decoding's noise (decode/noise.h) and the fused Gumbel-max LM head
// (kernels/kernels.h) draw from it, so both see the same numbers.
#pragma once

#include <cstdint>

namespace llada {

// Value `index` of the stream of `seed`, uniform in [0, 1) with 53 random bits.
inline double counter_uniform(uint64_t seed, uint64_t index) {
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + index + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;
}

}  // namespace llada
