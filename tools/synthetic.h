// Random-weight models at any shape, written as real GGUF files in llama.cpp's layout, for speed
// and memory work (up to the full LLaDA-8B shape); and re-quantisation of existing GGUFs to
// llama-quantize's mixes (tools/quant_mix.h).
#pragma once

#include <cstdint>
#include <string>

#include "format/tensor_type.h"
#include "runtime/thread_pool.h"
#include "tools/quant_mix.h"

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
// weights, every matrix in `type` (norms and MoE routers F32; a matrix whose rows `type`'s block
// does not divide takes llama-quantize's fallback, as with --pure), and a byte-level vocabulary
// padded to n_vocab with unused filler tokens plus BOS/EOS/mask/end-of-turn specials (at
// LLaDA-8B's ids when the vocabulary has LLaDA-8B's size). general.file_type is that of
// file_type_of(type) (tools/quant_mix.h).
void write_synthetic(const SyntheticShape& shape, format::TensorType type, uint64_t seed,
                     const std::string& path, runtime::ThreadPool& pool, bool progress = false);
// The same for file type `ft` (its general.file_type): a name that is a tensor type (Q4_0,
// Q6_K, F16, ...) puts every matrix in that type; a mix (Q4_K_M, Q5_K_S, Q3_K_L, ...) gives each
// tensor the type llama-quantize's rules give it in a model of this shape (tools/quant_mix.h).
void write_synthetic(const SyntheticShape& shape, const FileType& ft, uint64_t seed,
                     const std::string& path, runtime::ThreadPool& pool, bool progress = false);

// Re-quantises the file (a GGUF or a Hugging Face directory) `in` to file type `ft`: each
// tensor's type is choose_type's (tools/quant_mix.h: llama-quantize's mix, or with `pure` every
// matrix and expert stack in the default type, as llama-quantize --pure), a line on stderr for
// each tensor that takes the fallback type; tensors already in their type are copied. Copies the
// metadata (tokenizer and chat template included) and sets general.file_type and
// general.quantization_version as llama-quantize does. progress: a line on stderr redrawn per
// tensor (for a terminal).
void requantize(const std::string& in, const std::string& out, const FileType& ft,
                runtime::ThreadPool& pool, bool pure = true, bool progress = false);
// The same for file_type_of(type): Q4_0 is the Q4_0 mix, Q4_K the Q4_K_M mix.
void requantize(const std::string& in, const std::string& out, format::TensorType type,
                runtime::ThreadPool& pool, bool pure = true, bool progress = false);
// The tile recipe's type for tensor `name` under tile type `type` (TQ8 for FFN down under TQ4).
// The row formats' mixes depend on the model and the tensor's shape: tools::choose_type. Throws
// llada::Error for a type that is not a tile format.
format::TensorType mix_type(const std::string& name, format::TensorType type, bool tied);

// The default tensor type of the file type called `name` (tools::parse_file_type: "Q4_K_M"
// gives Q4_K, "tq8" TQ8); throws llada::Error listing the accepted names otherwise.
format::TensorType parse_type(const std::string& name);

}  // namespace llada::tools
