// Random-weight models at any shape, written as real GGUF files in llama.cpp's layout, for speed
// and memory work (up to the full LLaDA-8B shape); and re-quantisation of existing GGUFs.
#pragma once

#include <cstdint>
#include <string>

#include "format/tensor_type.h"
#include "runtime/thread_pool.h"

namespace llada::tools {

struct SyntheticShape {
    std::string arch = "llada";
    int n_layer = 2;
    int64_t n_embd = 64;
    int64_t n_head = 4;
    int64_t n_kv_head = 4;
    int64_t n_ff = 128;
    int64_t n_vocab = 512;
    int n_ctx = 4096;
    float rope_base = 500000.0f;

    int64_t n_params() const;
};

// "tiny", "1b" (d 2048, 16 layers, 16 heads, ffn 5632, vocab 32000) or "8b" (LLaDA-8B: 32
// layers, d 4096, 32 heads, ffn 12288, vocab 126464), optionally followed by ",key=value"
// overrides (layers, d, heads, kv_heads, ffn, vocab, ctx, arch); or only key=value pairs.
// Throws llada::Error naming a bad key or value.
SyntheticShape parse_shape(const std::string& spec);

// Writes a model with uniform random weights (std 0.02, deterministic in `seed`), unit norm
// weights, every matrix in `type` (norms F32), and a byte-level vocabulary padded to n_vocab with
// unused filler tokens plus BOS/EOS/mask/end-of-turn specials (at LLaDA-8B's ids when the
// vocabulary has LLaDA-8B's size).
void write_synthetic(const SyntheticShape& shape, format::TensorType type, uint64_t seed,
                     const std::string& path, runtime::ThreadPool& pool);

// Re-quantises every 2-D tensor of `in` to `type` (as llama-quantize --pure does), keeps 1-D
// tensors as they are, copies the metadata, and sets general.file_type.
void requantize(const std::string& in, const std::string& out, format::TensorType type,
                runtime::ThreadPool& pool);

// "F32", "F16", "BF16", "Q8_0", "Q4_0" (case-insensitive); throws llada::Error otherwise.
format::TensorType parse_type(const std::string& name);

}  // namespace llada::tools
