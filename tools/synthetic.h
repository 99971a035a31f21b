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
    bool qkv_bias = false;  // Q/K/V projection biases (Qwen2's block: Dream)
    // Mixture of experts (arch llada-moe): n_expert experts of n_ff_expert, n_expert_used per
    // token, a router kept in F32 (as llama-quantize keeps ffn_gate_inp), Q/K norms per head.
    int64_t n_expert = 0;
    int64_t n_expert_used = 0;
    int64_t n_ff_expert = 0;

    int64_t n_params() const;
};

// "tiny", "1b" (d 2048, 16 layers, 16 heads, ffn 5632, vocab 32000), "8b" (LLaDA-8B: 32
// layers, d 4096, 32 heads, ffn 12288, vocab 126464) or "dream-7b" (Dream-7B, Qwen2-7B's block:
// arch dream, 28 layers, d 3584, 28 heads over 4 KV heads, ffn 18944, vocab 152064, Q/K/V
// biases, rope base 1e6) or "llada-moe" (LLaDA-MoE-7B-A1B: 16 layers, d 2048, 16 heads, 64
// experts of 1024 with 8 used per token, vocab 157184, rope base 5e4), optionally followed by
// ",key=value" overrides (layers, d, heads, kv_heads, ffn, vocab, ctx, arch, experts, used,
// expert_ffn); or only key=value pairs.
// Throws llada::Error naming a bad key or value.
SyntheticShape parse_shape(const std::string& spec);

// Writes a model with uniform random weights (std 0.02, deterministic in `seed`), unit norm
// weights, every matrix in `type` (norms F32), and a byte-level vocabulary padded to n_vocab with
// unused filler tokens plus BOS/EOS/mask/end-of-turn specials (at LLaDA-8B's ids when the
// vocabulary has LLaDA-8B's size).
void write_synthetic(const SyntheticShape& shape, format::TensorType type, uint64_t seed,
                     const std::string& path, runtime::ThreadPool& pool, bool progress = false);

// Re-quantises the 2-D and 3-D (expert) tensors of `in` to `type` (routers stay as they are), keeps
// 1-D tensors as they are, copies the metadata (tokenizer and chat template included) and sets
// general.file_type. pure: every 2-D tensor in `type` (llama-quantize --pure). Otherwise the mix
// rule: with Q4_0, output.weight (or, tied, token_embd.weight) stays at Q8_0, as llama-quantize
// keeps the head at a higher precision (it picks Q6_K, which llada.cpp does not read). progress: a
// line on stderr redrawn per tensor (for a terminal).
void requantize(const std::string& in, const std::string& out, format::TensorType type,
                runtime::ThreadPool& pool, bool pure = true, bool progress = false);
// The type the mix rule gives tensor `name` of a file quantised to `type` (tied: no output.weight).
format::TensorType mix_type(const std::string& name, format::TensorType type, bool tied);

// "F32", "F16", "BF16", "Q8_0", "Q4_0" (case-insensitive); throws llada::Error otherwise.
format::TensorType parse_type(const std::string& name);

}  // namespace llada::tools
