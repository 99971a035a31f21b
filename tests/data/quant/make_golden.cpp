// Writes golden.bin: llama.cpp's own quantizers (ggml_quantize_chunk, no importance matrix, as
// llama-quantize calls them without --imatrix) applied to deterministic inputs, the oracle of
// tests/quant_golden_test.cpp. Built and run by make_golden.sh against a llama.cpp source tree;
// the file format is described in README.md next to this file.
//
//   make_golden OUT.bin
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ggml.h"

namespace {

// The types llada.cpp reads and writes, by their GGML ids (which golden.bin records).
const ggml_type kTypes[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,   GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                            GGML_TYPE_Q8_0, GGML_TYPE_IQ4_NL, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
                            GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,   GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS};

// splitmix64: a small generator whose sequence does not depend on the C++ library.
struct Rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
    double gauss() {  // Box-Muller; u1 is kept away from 0
        const double u1 = (static_cast<double>(next() >> 11) + 1.0) / 9007199254740993.0;
        const double u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }
};

struct Input {
    std::string name;
    int rows, per_row;
    std::vector<float> x;
};

// The input sets: each aims at a branch of the searches (see README.md).
std::vector<Input> make_inputs() {
    std::vector<Input> out;
    Rng rng{20240601};
    const auto add = [&](const char* name, int rows, int per_row, auto value) {
        Input in{name, rows, per_row, std::vector<float>(static_cast<size_t>(rows) * per_row)};
        for (int r = 0; r < rows; ++r)
            for (int i = 0; i < per_row; ++i)
                in.x[static_cast<size_t>(r) * per_row + i] = static_cast<float>(value(r, i));
        out.push_back(std::move(in));
    };
    add("gaussian", 4, 256, [&](int, int) { return rng.gauss(); });
    add("gaussian_weights", 2, 512, [&](int, int) { return 0.02 * rng.gauss(); });
    add("uniform", 3, 256, [&](int, int) { return 2.0 * rng.uniform() - 1.0; });
    add("uniform_positive", 2, 256, [&](int, int) { return 0.5 + 1.5 * rng.uniform(); });
    add("outliers", 2, 512, [&](int, int) {
        const double g = rng.gauss();
        return rng.uniform() < 0.02 ? 50.0 * g : g;
    });
    add("zeros", 2, 256, [&](int, int) { return 0.0; });
    add("constant", 2, 256, [&](int r, int) { return r == 0 ? 0.5 : -3.0; });
    add("tiny", 2, 256, [&](int, int) { return 1e-8 * rng.gauss(); });
    add("fp16_subnormal_scales", 2, 256, [&](int, int) { return 1e-4 * rng.gauss(); });
    add("single_nonzero", 2, 512, [&](int r, int i) {
        if (r == 0) return i == 37 ? 1.5 : 0.0;
        return i == 300 ? -2.0 : 0.0;
    });
    add("dynamic_range", 3, 256, [&](int, int) {
        const double mag = std::pow(10.0, -6.0 + 8.0 * rng.uniform());
        return rng.uniform() < 0.5 ? -mag : mag;
    });
    // Multiples of 1/4: many values fall exactly half-way between levels.
    add("grid_ties", 2, 256,
        [&](int, int) { return static_cast<double>(static_cast<int>(rng.next() % 17) - 8) / 4.0; });
    // Zero and non-zero 16- and 32-value groups side by side within one super-block.
    add("sparse_groups", 2, 512, [&](int r, int i) {
        const int group = r == 0 ? i / 16 : i / 32;
        return group % 3 == 1 ? 0.0 : rng.gauss();
    });
    // 16-value groups of uniform values on which Q3_K's level refinement is still moving a
    // level in its fifth and last sweep, so that the sweep limit ends it (the seeds were found
    // by trying seeds in order; about one group in 500 does this).
    constexpr uint64_t kSlowQ3Seeds[16] = {345,  2430,  2838,  4181,  4394,  4975,  6902,  6957,
                                           9499, 10562, 12704, 14189, 14991, 15466, 16525, 16713};
    Rng group{0};
    add("q3_slow_refinement", 1, 256, [&](int, int i) {
        if (i % 16 == 0) group = Rng{kSlowQ3Seeds[i / 16]};
        return 2.0 * group.uniform() - 1.0;
    });
    return out;
}

void put_u32(FILE* f, uint32_t v) {
    const unsigned char b[4] = {static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8),
                                static_cast<unsigned char>(v >> 16),
                                static_cast<unsigned char>(v >> 24)};
    std::fwrite(b, 1, 4, f);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_golden OUT.bin\n");
        return 2;
    }
    static_assert(sizeof(float) == 4, "float32 inputs");
    const uint32_t probe = 1;
    unsigned char first;
    std::memcpy(&first, &probe, 1);
    if (first != 1) {
        std::fprintf(stderr, "make_golden: the format is little-endian; run on such a host\n");
        return 1;
    }
    const std::vector<Input> inputs = make_inputs();
    const size_t n_types = sizeof kTypes / sizeof kTypes[0];
    FILE* f = std::fopen(argv[1], "wb");
    if (!f) {
        std::perror(argv[1]);
        return 1;
    }
    std::fwrite("LQGD", 1, 4, f);
    put_u32(f, 1);  // version
    put_u32(f, static_cast<uint32_t>(inputs.size()));
    put_u32(f, static_cast<uint32_t>(n_types));
    for (const Input& in : inputs) {
        put_u32(f, static_cast<uint32_t>(in.name.size()));
        std::fwrite(in.name.data(), 1, in.name.size(), f);
        put_u32(f, static_cast<uint32_t>(in.rows));
        put_u32(f, static_cast<uint32_t>(in.per_row));
        std::fwrite(in.x.data(), sizeof(float), in.x.size(), f);  // little-endian host
        for (const ggml_type type : kTypes) {
            const size_t bytes = ggml_row_size(type, in.per_row) * in.rows;
            std::vector<unsigned char> q(bytes);
            const size_t written =
                ggml_quantize_chunk(type, in.x.data(), q.data(), 0, in.rows, in.per_row, nullptr);
            if (written != bytes) {
                std::fprintf(stderr, "make_golden: %s wrote %zu bytes, not %zu\n",
                             ggml_type_name(type), written, bytes);
                return 1;
            }
            put_u32(f, static_cast<uint32_t>(type));
            put_u32(f, static_cast<uint32_t>(bytes));
            std::fwrite(q.data(), 1, bytes, f);
        }
    }
    if (std::fclose(f) != 0) {
        std::perror(argv[1]);
        return 1;
    }
    std::printf("make_golden: %zu inputs x %zu types -> %s\n", inputs.size(), n_types, argv[1]);
    return 0;
}
