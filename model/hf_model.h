// A Hugging Face model directory read as the GGUF that llama.cpp's converter would write from it:
// config.json -> the architecture's metadata keys, tokenizer.json -> the vocabulary, and the
// safetensors under GGUF tensor names (LLaDA's Q/K rows permuted as the converter permutes them).
#pragma once

#include <memory>
#include <string>

#include "format/gguf.h"

namespace llada::model {

// A GGUF file, or a directory holding a Hugging Face model.
std::unique_ptr<format::GgufFile> open_model_file(const std::string& path);

// Supported: LLaDAModelLM (arch llada) and DreamModel (arch dream), weights in F32, F16 or BF16
// (kept in their type: no conversion, only the permuted Q/K rows are copied). Throws
// llada::Error naming the file, the config key or the tensor: an unsupported architecture
// (listing the supported ones), a missing file or tensor, a shape config.json disagrees with.
std::unique_ptr<format::GgufFile> open_hf_directory(const std::string& dir);

}  // namespace llada::model
