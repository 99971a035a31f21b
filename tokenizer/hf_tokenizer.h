// A Hugging Face tokenizer.json (with tokenizer_config.json and config.json) turned into the
// `tokenizer.*` GGUF metadata llama.cpp's converter would write from it, so a directory's
// vocabulary loads through Tokenizer::from_gguf like any GGUF's.
#pragma once

#include <cstdint>

#include "format/gguf_writer.h"
#include "format/hf_directory.h"

namespace llada::tokenizer {

// Writes tokenizer.ggml.{model, pre, tokens, token_type, merges}, the special token ids (BOS,
// EOS, padding from tokenizer_config.json or config.json; the mask from config.json's
// mask_token_id or tokenizer_config.json's mask_token), add_bos_token (tokenizer_config.json's,
// else `add_bos_default`) and tokenizer.chat_template. As the converter: ids 0..vocab_size-1,
// an id with no token is "[PAD<id>]" of type UNUSED, added tokens are CONTROL when special and
// USER_DEFINED otherwise. The pre-tokenizer is recognised by its regexes
// (pre_type_for_regexes). Throws llada::Error naming the file and field for anything else: a
// model that is not byte-level BPE, an unknown pre-tokenizer or normaliser, an id past
// vocab_size, a special token that is not in the vocabulary.
void hf_tokenizer_to_gguf(const format::HfDirectory& dir, int64_t vocab_size, bool add_bos_default,
                          format::GgufWriter& w);

}  // namespace llada::tokenizer
