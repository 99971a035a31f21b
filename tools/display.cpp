// The live view of llada-cli: redraws the canvas after every denoising step.
#include "tools/display.h"

#include <sys/ioctl.h>
#include <unistd.h>

namespace llada::tools {
namespace {

constexpr const char* kDim = "\x1b[2m";
constexpr const char* kHighlight = "\x1b[1;32m";
constexpr const char* kDraft = "\x1b[2;3;36m";  // dim italic cyan
constexpr const char* kStable = "\x1b[1m";
constexpr const char* kRevised = "\x1b[1;33m";   // bold yellow: a check changed it
constexpr const char* kNewStable = "\x1b[1;4m";  // bold underlined: stable since this step
constexpr const char* kReset = "\x1b[0m";
constexpr const char* kMaskGlyph = "\xe2\x96\x91";  // U+2591 light shade
constexpr const char* kSpecialGlyph = "\xc2\xb7";   // U+00B7 middle dot

// Columns and line breaks of printed text (one column per code point; escapes excluded).
struct Extent {
    int lines = 1;
    int col = 0;
    void add(const std::string& s, int width) {
        for (size_t i = 0; i < s.size(); ++i) {
            const unsigned char c = static_cast<unsigned char>(s[i]);
            if (c == '\x1b') {  // skip an SGR escape
                while (i < s.size() && s[i] != 'm')
                    ++i;
                continue;
            }
            if (c == '\n') {
                ++lines;
                col = 0;
            } else if ((c & 0xc0) != 0x80) {
                if (col == width) {
                    ++lines;
                    col = 0;
                }
                ++col;
            }
        }
    }
};

// Control characters in generated text (a carriage return, an escape) would corrupt the
// redraw, so the view shows them as U+FFFD; newlines and tabs stay.
std::string printable(const std::string& s) {
    std::string out;
    for (char ch : s) {
        const unsigned char c = static_cast<unsigned char>(ch);
        if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
            out += "\xef\xbf\xbd";
        } else {
            out += ch;
        }
    }
    return out;
}

// Renders the generated region; `committed` positions are highlighted when `ansi` is set. With
// token states (the step engine's policies) drafts show their token dimmed, visible tokens
// plain and stable tokens bold.
std::string render(const tokenizer::Tokenizer& tok, const decode::TokenIds& ids,
                   std::span<const int32_t> canvas, int prompt_len,
                   std::span<const int32_t> committed, bool ansi,
                   std::span<const decode::TokenState> states = {},
                   std::span<const int32_t> drafts = {}, std::span<const int32_t> revised = {},
                   std::span<const decode::TokenState> before = {}) {
    std::string out;
    tokenizer::StreamDecoder dec(tok, false);
    const char* style_now = "";  // the SGR style of the pieces the decoder holds
    auto flush = [&] { out += printable(dec.flush()); };
    auto styled = [&](const char* style, const std::string& piece) {
        if (!ansi || piece.empty()) return piece;
        return std::string(style) + piece + kReset;
    };
    for (size_t p = static_cast<size_t>(prompt_len); p < canvas.size(); ++p) {
        const int32_t t = canvas[p];
        const bool has_state = p < states.size();
        if (has_state && states[p] == decode::TokenState::Draft && p < drafts.size() &&
            drafts[p] >= 0) {
            flush();
            out += styled(kDraft, printable(tok.decode({drafts[p]}, false)));
            continue;
        }
        if (t == ids.mask) {
            flush();
            out += ansi ? std::string(kDim) + kMaskGlyph + kReset : kMaskGlyph;
            continue;
        }
        if (tok.is_control(t)) {
            flush();
            out += ansi ? std::string(kDim) + kSpecialGlyph + kReset : kSpecialGlyph;
            continue;
        }
        bool now = false, changed = false;
        for (int32_t c : committed)
            now |= static_cast<size_t>(c) == p;
        for (int32_t c : revised)
            changed |= static_cast<size_t>(c) == p;
        const bool stable = has_state && states[p] == decode::TokenState::Stable;
        const bool new_stable =
            stable && p < before.size() && before[p] != decode::TokenState::Stable;
        const char* style = changed      ? kRevised
                            : now        ? kHighlight
                            : new_stable ? kNewStable
                            : stable     ? kStable
                                         : "";
        if (style != style_now) flush();
        style_now = style;
        out += styled(style, printable(dec.feed(t)));
    }
    flush();
    return out;
}

// One line naming each style (only for policies with token states).
std::string legend() {
    return std::string(kDim) + kMaskGlyph + " masked" + kReset + "  " + kDraft + "draft" + kReset +
           "  visible  " + kStable + "stable" + kReset + "  " + kHighlight + "new" + kReset + "  " +
           kRevised + "revised" + kReset + "  " + kNewStable + "now stable" + kReset + "\n";
}

}  // namespace

CanvasView::CanvasView(const tokenizer::Tokenizer& tok, const decode::TokenIds& ids, std::FILE* out)
    : tok_(tok), ids_(ids), out_(out) {}

int CanvasView::terminal_columns() const {
    winsize ws{};
    if (ioctl(fileno(out_), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    return 80;
}

void CanvasView::draw(const decode::StepEvent& ev) {
    const int width = terminal_columns();
    std::string text =
        std::string(kDim) + "step " + std::to_string(ev.info.step + 1) + "/" +
        std::to_string(ev.total_steps) + "  block " + std::to_string(ev.info.block + 1) + "  +" +
        std::to_string(ev.info.committed) +
        (ev.info.lookahead > 0 || ev.info.drafts_accepted > 0 || ev.info.drafts_rejected > 0
             ? "  lookahead " + std::to_string(ev.info.lookahead) + "  drafts +" +
                   std::to_string(ev.info.drafts_accepted) + " accepted -" +
                   std::to_string(ev.info.drafts_rejected) + " rejected"
             : "") +
        (ev.info.checks > 0 || ev.info.revised > 0 || ev.info.remasked > 0
             ? "  checks " + std::to_string(ev.info.checks) + "  revised " +
                   std::to_string(ev.info.revised + ev.info.remasked) + "  now stable " +
                   std::to_string(ev.info.stabilised)
             : "") +
        kReset + "\n";
    if (!ev.states.empty()) text += legend();
    const std::vector<int32_t> prompt(ev.canvas.begin(), ev.canvas.begin() + ev.prompt_len);
    text += printable(tok_.decode(prompt, false));
    text += render(tok_, ids_, ev.canvas, ev.prompt_len, ev.committed, true, ev.states, ev.drafts,
                   ev.revised, before_);
    before_.assign(ev.states.begin(), ev.states.end());
    if (lines_drawn_ > 0) {
        std::fputs("\r", out_);
        if (lines_drawn_ > 1) std::fprintf(out_, "\x1b[%dA", lines_drawn_ - 1);
        std::fputs("\x1b[J", out_);
    }
    std::fputs(text.c_str(), out_);
    std::fflush(out_);
    Extent e;
    e.add(text, width);
    lines_drawn_ = e.lines;
}

void CanvasView::finish() {
    if (lines_drawn_ > 0) std::fputs("\n", out_);
    std::fflush(out_);
    lines_drawn_ = 0;
}

std::string CanvasView::render_plain(const tokenizer::Tokenizer& tok, const decode::TokenIds& ids,
                                     std::span<const int32_t> canvas, int prompt_len,
                                     const char* mask_glyph) {
    std::string s = render(tok, ids, canvas, prompt_len, {}, false);
    std::string out;
    const std::string g = kMaskGlyph;
    for (size_t i = 0; i < s.size();) {
        if (s.compare(i, g.size(), g) == 0) {
            out += mask_glyph;
            i += g.size();
        } else {
            out += s[i++];
        }
    }
    return out;
}

}  // namespace llada::tools
