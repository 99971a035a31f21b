// The live view of llada-cli: redraws the canvas after every denoising step, masked positions
// shown distinctly and the tokens committed at this step highlighted.
#pragma once

#include <cstdio>
#include <span>
#include <string>

#include "decode/policy.h"
#include "tokenizer/tokenizer.h"

namespace llada::tools {

class CanvasView {
  public:
    CanvasView(const tokenizer::Tokenizer& tok, const decode::TokenIds& ids, std::FILE* out);
    // Redraws in place: erases what the previous draw printed, then prints the new state.
    void draw(const decode::StepEvent& ev);
    // Leaves the last drawing on screen and moves below it.
    void finish();

    // The text of the generated region with masked positions as `mask_glyph` and no colours
    // (used by tests and non-ANSI output).
    static std::string render_plain(const tokenizer::Tokenizer& tok, const decode::TokenIds& ids,
                                    std::span<const int32_t> canvas, int prompt_len,
                                    const char* mask_glyph);

  private:
    int terminal_columns() const;
    const tokenizer::Tokenizer& tok_;
    decode::TokenIds ids_;
    std::FILE* out_;
    int lines_drawn_ = 0;
    std::vector<decode::TokenState> before_;  // the states of the last drawn step
};

}  // namespace llada::tools
