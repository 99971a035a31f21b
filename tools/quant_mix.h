// llada-quantize's file types (llama-quantize's mixes) and the rule that picks each tensor's type.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "format/gguf.h"
#include "format/tensor_type.h"

namespace llada::tools {

// A file type, what --type names: llama-quantize's mixes (Q4_K_M, Q2_K, ...), the single-type
// files (F32, F16, BF16) and llada.cpp's tile formats (TQ4, TQ8, TF16).
struct FileType {
    const char* name;
    // What general.file_type holds: llama.cpp's enum llama_ftype (include/llama.h), as
    // llama-quantize writes it; a tile format's own type id, as llama.cpp has none for them.
    uint32_t llama_ftype;
    // The type every quantised tensor takes unless a rule of the mix says otherwise.
    format::TensorType default_type;
};

// Every file type, in the order --help lists them.
std::span<const FileType> file_types();
// Their names, comma-separated ("F32, F16, ..., TF16"), for help and error messages.
std::string file_type_names();
// The file type called `name`, case-insensitively; Q3_K, Q4_K and Q5_K are llama-quantize's
// aliases of Q3_K_M, Q4_K_M and Q5_K_M. Throws llada::Error listing the accepted names.
const FileType& parse_file_type(std::string_view name);
// The file type of a file with every matrix in `type`: the one named after it (Q4_K gives
// Q4_K_M, what llama.cpp guesses for a file mostly in Q4_K).
const FileType& file_type_of(format::TensorType type);

// What the rule needs to know about the model as a whole.
struct ModelFacts {
    std::string arch;        // general.architecture
    int n_layer = 0;         // {arch}.block_count
    int n_gqa = 1;           // query heads per K/V head (head_count / head_count_kv)
    int n_expert = 0;        // {arch}.expert_count; 0 for a dense model
    int n_attention_wv = 0;  // how many tensors count as V projections (one per block)
    bool tied = false;       // no output.weight: token_embd.weight is the head as well
    // llama.cpp's "70B" model type, the only model type its rules consult: arch llama with 80
    // blocks and grouped K/V heads. Never true for llada, dream or llada-moe.
    bool llama_70b = false;
};
// The facts of a file (a GGUF or a Hugging Face directory read as one).
ModelFacts model_facts(const format::GgufFile& f);

// One tensor as the rule sees it.
struct TensorFacts {
    std::string_view name;
    uint32_t n_dims = 2;
    int64_t row_length = 0;                             // ne[0], the values per row
    format::TensorType type = format::TensorType::F32;  // its type in the input file
};

// The type tensor `t` takes in a file of type `ft`: its own type if it is not quantised (vectors,
// norms, MoE routers), else the mix's rule (or, with `pure`, the default type, as llama-quantize
// --pure), then llama-quantize's fallback when the type's block does not divide the rows. When
// the fallback applies and `fallback_note` is given, it receives a sentence saying so. Throws
// llada::Error when no type fits the rows (llama-quantize refuses those too).
format::TensorType choose_type(const FileType& ft, const ModelFacts& m, const TensorFacts& t,
                               bool pure, std::string* fallback_note = nullptr);

}  // namespace llada::tools
