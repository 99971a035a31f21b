// The decoding options' table (decode/options.h).
#include "decode/options.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "util/error.h"

namespace llada::decode {

namespace {

constexpr int kEvery = -1;
constexpr int group(Takes t) {
    return static_cast<int>(t);
}

std::vector<OptionSpec> make_table() {
    using K = OptionKind;
    const char* const dec = "Decoding";
    const char* const mbsd = "Multi-block speculation (--policy mbsd)";
    const char* const pipe = "Pipelined blocks (--policy pipeline)";
    const char* const rev =
        "Progressive revision (--revise; policies threshold, dual-cache, mbsd, ...)";
    const char* const sc = "Self-checks (--self-check; policies need, mbsd)";
    const char* const dream = "Dream's sampler (--policy dream)";
    const char* const l2 = "LLaDA 2.x (--policy llada2)";
    const char* const tts = "Test-time scaling";
    const char* const mem = "Kernels and memory";
    const int blocks = group(Takes::Blocks), steps = group(Takes::Steps),
              rule = group(Takes::CommitRule), refresh = group(Takes::Refresh),
              revise = group(Takes::Revise), self = group(Takes::SelfCheck),
              look = group(Takes::Lookahead), pl = group(Takes::Pipeline),
              ds = group(Takes::DreamSampler), bc = group(Takes::BlockCausal);
    const std::string tau = number_str(kDefaultThreshold);
    // clang-format off
    return {
        {dec, "--gen", "max_tokens", K::Int, 1, 1 << 20, nullptr, kEvery, "N",
         "generated positions (default: the model's recommendation, else 128)",
         [](GenerateOptions& o) -> void* { return &o.gen; }},
        {dec, "--steps", "steps", K::Int, 1, 1 << 20, nullptr, steps, "N",
         "denoising steps in total (default: --gen, one token per step)",
         [](GenerateOptions& o) -> void* { return &o.steps; }},
        {dec, "--block", "block", K::Int, 1, 1 << 20, nullptr, blocks, "N",
         "block length (default: the model's recommendation, else 32)",
         [](GenerateOptions& o) -> void* { return &o.block; }},
        {dec, "--temperature", "temperature", K::Real, 0, 100, nullptr, kEvery, "T",
         "Gumbel-max sampling temperature; 0 = argmax (default 0)",
         [](GenerateOptions& o) -> void* { return &o.temperature; }},
        {dec, "--top-k", "top_k", K::Int, 0, 1 << 30, nullptr, kEvery, "K",
         "with --temperature > 0: sample among the K most likely tokens; 0 = off\n"
         "(default; also Dream's sampler's filter)",
         [](GenerateOptions& o) -> void* { return &o.filter.top_k; }},
        {dec, "--min-p", "min_p", K::Real, 0, 1, nullptr, kEvery, "P",
         "with --temperature > 0: sample among the tokens at least P times as likely as\n"
         "the most likely one (after --top-k); 0 = off (default)",
         [](GenerateOptions& o) -> void* { return &o.filter.min_p; }},
        {dec, "--cfg", nullptr, K::Real, 0, 1e6, nullptr, kEvery, "W",
         "classifier-free guidance scale; 0 = off (default 0)",
         [](GenerateOptions& o) -> void* { return &o.cfg; }},
        {dec, "--remasking", nullptr, K::Choice, 0, 0, nullptr, kEvery, "MODE",
         "low_confidence (default) or random"},
        {dec, "--seed", "seed", K::Seed, 0, 4294967295.0, nullptr, kEvery, "S",
         "seed of the sampling noise (default 0)",
         [](GenerateOptions& o) -> void* { return &o.seed; }},
        {dec, "--threshold", "threshold", K::Real, 0, 1, "threshold", rule, "TAU",
         "parallel commits: every masked position of the block with confidence >= TAU\n"
         "(at least one per step); with --policy threshold, prefix-cache or dual-cache,\n"
         "e.g. --policy dual-cache --threshold 0.9 (policy threshold defaults to " + tau + ")",
         [](GenerateOptions& o) -> void* { return &o.threshold; }},
        {dec, "--factor", nullptr, K::Real, 0, 1e6, "factor", rule, "F",
         "parallel commits by the factor rule: the n-th most confident position needs\n"
         ">= 1 - F/(n+1); instead of --threshold",
         [](GenerateOptions& o) -> void* { return &o.factor; }},
        {dec, "--refresh", nullptr, K::Int, 0, 1 << 20, nullptr, refresh, "N",
         "cache policies: also refresh every K/V with a full forward every N steps\n"
         "within a block (default 0: only at each block start)",
         [](GenerateOptions& o) -> void* { return &o.refresh; }},
        {dec, "--need-refresh", nullptr, K::Choice, 0, 0, nullptr, group(Takes::NeedRefresh),
         "once|suffix|block",
         "windows of need (need, mbsd, pipeline): beyond each committed row recomputed once\n"
         "after its commit, at each block's first step the masked rows after the block\n"
         "(suffix, default), every row then and the block's committed rows at its other\n"
         "steps (block), or none (once)"},
        {dec, "--early-stop", nullptr, K::Switch, 0, 0, nullptr, kEvery, "",
         "stop once a finished block holds end-of-text (default for all but vanilla)"},
        {dec, "--no-early-stop", nullptr, K::Switch, 0, 0, nullptr, kEvery, "",
         "decode every block even after end-of-text"},
        {dec, "--lut-exp", nullptr, K::Switch, 0, 0, nullptr, kEvery, "",
         "attention softmax through a 32,768-entry exp table (fp16 inputs)"},
        {dec, "--lut-dequant", nullptr, K::Switch, 0, 0, nullptr, kEvery, "",
         "Q4_0 matmuls dequantise through 16-entry tables with float activations\n"
         "(instead of int8 dot products on Q8-quantised activations)"},
        {dec, "--kv-f16", nullptr, K::Switch, 0, 0, nullptr, kEvery, "",
         "keep the KV cache in fp16 (half its memory and half the bytes attention reads;\n"
         "llama.cpp's default cache type) instead of float32; keys and values beyond\n"
         "+-65504 become infinite there, as in llama.cpp"},
        {mbsd, "--lookahead", "lookahead", K::Count, 0, 1 << 20, nullptr, look, "auto|N",
         "lookahead rows from the next block(s) per step: auto (default) sizes it from\n"
         "the device's latency table (npu-sim) or this host's calibrated forward cost;\n"
         "N forces N (0: the same policy without speculation, i.e. --policy need)",
         [](GenerateOptions& o) -> void* { return &o.lookahead; }},
        {mbsd, "--lookahead-mem", nullptr, K::Real, 0, 1e9, nullptr, look, "MIB",
         "auto lookahead: cap the window's activation memory at MIB (default: no cap)",
         [](GenerateOptions& o) -> void* { return &o.lookahead_mem_mb; }},
        {mbsd, "--accept", nullptr, K::Real, 0, 1, nullptr, look, "P",
         "accept a draft when its block's first forward predicts the same token with\n"
         "confidence >= P (default 0.5); rejected drafts return to masked",
         [](GenerateOptions& o) -> void* { return &o.accept; }},
        {mbsd, "--draft-input", nullptr, K::Choice, 0, 0, nullptr, look, "mask|token",
         "what draft rows feed the window: the mask token (default) or the draft token"},
        {mbsd, "--calibrate", nullptr, K::Switch, 0, 0, nullptr, look, "",
         "measure this host's forward cost by row count again (auto lookahead on cpu)"},
        {pipe, "--pipeline-start", nullptr, K::Real, 0, 1, nullptr, pl, "S",
         "a later block starts decoding beside the current one once a share S of the\n"
         "block before it is committed (default 0: from the first step; 1: never,\n"
         "i.e. --policy need)",
         [](GenerateOptions& o) -> void* { return &o.pipeline_start; }},
        {pipe, "--pipeline-threshold", nullptr, K::Real, 0, 1, nullptr, pl, "TAU",
         "a block decoding ahead commits its positions with confidence >= TAU\n"
         "(default: --threshold's default)",
         [](GenerateOptions& o) -> void* { return &o.pipeline_threshold; }},
        {pipe, "--pipeline-min", nullptr, K::Int, 0, 1 << 20, nullptr, pl, "N",
         "... and at least its N most confident positions each step (default 0)",
         [](GenerateOptions& o) -> void* { return &o.pipeline_min; }},
        {pipe, "--pipeline-accept", nullptr, K::Real, 0, 1, nullptr, pl, "P",
         "a position committed ahead counts when its check predicts the same token with\n"
         "confidence >= P (default 0.5); else it is masked again",
         [](GenerateOptions& o) -> void* { return &o.pipeline_accept; }},
        {pipe, "--pipeline-depth", nullptr, K::Int, 1, 1 << 20, nullptr, pl, "N",
         "blocks that may decode ahead of the current one, each starting once the block\n"
         "before it is --pipeline-start along (default 3)",
         [](GenerateOptions& o) -> void* { return &o.pipeline_depth; }},
        {pipe, "--pipeline-verify", nullptr, K::Choice, 0, 0, nullptr, pl, "mask|shadow|window",
         "how an ahead commit is checked: shadow (default: a check row blind to the token\n"
         "beside it, so the checks of several blocks share one forward, kept while they\n"
         "pass in order), mask (its block's first forward feeds the mask there) or\n"
         "window (the next forward feeds the mask there, every block at once)"},
        {rev, "--revise", "revise", K::Switch, 0, 0, nullptr, revise, "",
         "keep committed tokens revisable: a check row (the mask at the position, which\n"
         "sees a mask there instead of the token) re-checks each visible token every\n"
         "step on a CPU path beside the dense window, until it is stable\n"
         "(docs/step-engine.md)",
         [](GenerateOptions& o) -> void* { return &o.revise.on; }},
        {rev, "--revise-mode", nullptr, K::Choice, 0, 0, nullptr, revise, "MODE",
         "a revised token becomes the check's argmax (replace, default) or masked\n"
         "again (remask)"},
        {rev, "--revise-margin", nullptr, K::Real, 0, 1e6, nullptr, revise, "M",
         "revise when another token beats the committed one by M in probability\n"
         "(default 0.5; above 1: never)",
         [](GenerateOptions& o) -> void* { return &o.revise.margin; }},
        {rev, "--revise-floor", nullptr, K::Real, 0, 1, nullptr, revise, "P",
         "revise when the committed token's re-evaluated probability is below P\n"
         "(default 0.02)",
         [](GenerateOptions& o) -> void* { return &o.revise.floor; }},
        {rev, "--stable-p", nullptr, K::Real, 0, 1, nullptr, revise, "P",
         "a check passes when the token's re-evaluated probability is >= P (default 0.9)",
         [](GenerateOptions& o) -> void* { return &o.revise.stable; }},
        {rev, "--stable-k", nullptr, K::Int, 0, 1 << 20, nullptr, revise, "K",
         "stable after K passing checks in a row (default 2; 0: when committed)",
         [](GenerateOptions& o) -> void* { return &o.revise.stable_k; }},
        {rev, "--stable-budget", nullptr, K::Int, 1, 1 << 20, nullptr, revise, "N",
         "stable at the latest N steps after its first commit (default 8)",
         [](GenerateOptions& o) -> void* { return &o.revise.budget; }},
        {rev, "--revise-rows", nullptr, K::Count, 0, 1 << 20, nullptr, revise, "auto|N",
         "CPU-path rows per step: 0 = check every visible token (default), N = at most\n"
         "N (refreshes, then the leftmost tokens), auto = what the projected CPU lane\n"
         "finishes within the dense step (a projected device)",
         [](GenerateOptions& o) -> void* { return &o.revise.rows; }},
        {rev, "--revise-context", nullptr, K::Choice, 0, 0, nullptr, revise, "fresh|snapshot",
         "what a check sees of last step's commits: their K/V recomputed on the CPU\n"
         "path (fresh, default) or the cache as it is (snapshot: fewer CPU rows)"},
        {rev, "--revise-tail", nullptr, K::Choice, 0, 0, nullptr, revise, "cpu|dense",
         "after the last block, the checks left: on the CPU path (cpu, default) or as\n"
         "forwards of the dense device, which idles then (dense)"},
        {rev, "--revise-threads", nullptr, K::Int, 1, 256, nullptr, revise, "N",
         "threads of the CPU path's own pool (default 1)",
         [](GenerateOptions& o) -> void* { return &o.revise.threads; }},
        {rev, "--revise-serial", nullptr, K::Switch, 0, 0, nullptr, revise, "",
         "run the CPU path after the dense forward on the same thread (for comparison)"},
        {sc, "--self-check", nullptr, K::Switch, 0, 0, nullptr, self, "",
         "the rows that recompute a committed token's K/V also predict it, and a\n"
         "prediction of another token replaces it: checks that cost no forward row,\n"
         "for a model trained to judge the tokens it is fed (tiny-llada-lc;\n"
         "docs/step-engine.md)",
         [](GenerateOptions& o) -> void* { return &o.self_check.on; }},
        {sc, "--self-check-accept", nullptr, K::Real, 0, 1, nullptr, self, "P",
         "replace a token when its refresh row predicts another one with probability\n"
         ">= P (default 0.75)",
         [](GenerateOptions& o) -> void* { return &o.self_check.accept; }},
        {sc, "--self-check-below", nullptr, K::Real, 0, 1, nullptr, self, "P",
         "check the tokens committed with confidence below P (default 0.99; 1: every\n"
         "token), those a check replaced, and those committed in a replacement's step",
         [](GenerateOptions& o) -> void* { return &o.self_check.below; }},
        {sc, "--self-check-threshold", nullptr, K::Real, 0, 1, nullptr, self, "TAU",
         "the commit threshold of every block but the last (a later forward checks\n"
         "them; default: --threshold)",
         [](GenerateOptions& o) -> void* { return &o.self_check.threshold; }},
        {dream, "--dream-alg", nullptr, K::Text, 0, 0, nullptr, ds, "ALG",
         "origin, maskgit_plus, topk_margin or entropy (default entropy): which masked\n"
         "positions a step fills (docs/dream-decoding.md)",
         [](GenerateOptions& o) -> void* { return &o.dream.alg; }},
        {dream, "--alg-temp", nullptr, K::Real, 0, 1e6, nullptr, ds, "T",
         "draw the positions from softmax(confidence / T) instead of taking the most\n"
         "confident (default 0)",
         [](GenerateOptions& o) -> void* { return &o.dream.alg_temp; }},
        {dream, "--eps", nullptr, K::Real, 0, 1, nullptr, ds, "E",
         "the schedule's end: linspace(1, E, steps + 1) (default 0.001)",
         [](GenerateOptions& o) -> void* { return &o.dream.eps; }},
        {dream, "--top-p", nullptr, K::Real, 0, 1, nullptr, ds, "P",
         "nucleus filter before sampling; 1 = off (default)",
         [](GenerateOptions& o) -> void* { return &o.dream.top_p; }},
        {l2, "--block-steps", "block_steps", K::Int, 1, 1 << 20, nullptr, bc, "N",
         "LLaDA2.0's steps per block, each committing at least its quota of the block's\n"
         "masks (default: the block length)",
         [](GenerateOptions& o) -> void* { return &o.block_steps; }},
        {l2, "--editing-threshold", "editing_threshold", K::Real, 0, 1, nullptr, bc, "P",
         "LLaDA2.1's token editing: a step also replaces a token of the block committed\n"
         "before it whose argmax is another token with probability > P (default: off)",
         [](GenerateOptions& o) -> void* { return &o.editing_threshold; }},
        {l2, "--max-post-steps", "max_post_steps", K::Int, 0, 1 << 20, nullptr, bc, "N",
         "with --editing-threshold: editing steps after a block's last mask (default 16)",
         [](GenerateOptions& o) -> void* { return &o.max_post_steps; }},
        {tts, "--tts", nullptr, K::Count, 1, 4096, nullptr, kEvery, "auto|N",
         "decode N candidates of the prompt together (seeds --seed .. --seed+N-1; give\n"
         "--temperature > 0 or --remasking random for diversity) and choose one; auto:\n"
         "as many as a step's window holds for about one's price (npu-sim)"},
        {tts, "--select", "select", K::Choice, 0, 0, nullptr, kEvery, "vote|confidence",
         "--tts: the majority answer (ties by mean confidence; default) or the candidate\n"
         "with the highest mean committed confidence"},
        {mem, "--full-last-layer", nullptr, K::Switch, 0, 0, nullptr, kEvery, "",
         "run the last layer on every window row (default: only the rows whose\n"
         "prediction is wanted go past its K/V store, as llama.cpp does)"},
        {mem, "--full-logits", nullptr, K::Switch, 0, 0, nullptr, kEvery, "",
         "write vocabulary-wide logits rows instead of the fused LM-head reduction"},
    };
    // clang-format on
}

}  // namespace

std::span<const OptionSpec> decode_options() {
    static const std::vector<OptionSpec> table = make_table();
    return table;
}

const OptionSpec* find_option(std::string_view flag) {
    for (const OptionSpec& s : decode_options()) {
        if (flag == s.flag) return &s;
    }
    return nullptr;
}

const OptionSpec* find_field(std::string_view field) {
    for (const OptionSpec& s : decode_options()) {
        if (s.field != nullptr && field == s.field) return &s;
    }
    return nullptr;
}

const OptionSpec& option(std::string_view flag) {
    const OptionSpec* s = find_option(flag);
    if (s == nullptr) throw Error("internal: no decoding option " + std::string(flag));
    return *s;
}

std::string range_error(std::string_view name, const OptionSpec& s, double hi) {
    return std::string(name) + " must be in [" + number_str(s.lo) + ", " +
           number_str(std::min(hi, s.hi)) + "]";
}

std::string zero_error(std::string_view name, const OptionSpec& s) {
    return std::string(name) + " 0 is not a " + s.zero_is_unset + ": give a value in (0, " +
           number_str(s.hi) + "], or leave it out for the policy's default";
}

void check_option(const OptionSpec& s, double v, std::string_view name, double hi) {
    if (s.kind == OptionKind::Switch) return;
    if (!(v >= s.lo && v <= std::min(hi, s.hi))) throw Error(range_error(name, s, hi));
    const bool integral =
        s.kind == OptionKind::Int || s.kind == OptionKind::Seed || s.kind == OptionKind::Count;
    // Integer options take integers: 1.5 tokens is an error, not 1.
    if (integral && v != std::floor(v)) throw Error(std::string(name) + " must be an integer");
    if (s.zero_is_unset != nullptr && v == 0.0) throw Error(zero_error(name, s));
}

void set_option(GenerateOptions& opt, const OptionSpec& s, double v, std::string_view name,
                double hi) {
    if (s.place == nullptr) throw Error("internal: " + std::string(s.flag) + " has no place");
    check_option(s, v, name, hi);
    void* p = s.place(opt);
    switch (s.kind) {
        case OptionKind::Int:
        case OptionKind::Count:
            *static_cast<int*>(p) = static_cast<int>(v);
            break;
        case OptionKind::Real:
            *static_cast<double*>(p) = v;
            break;
        case OptionKind::Seed:
            *static_cast<uint64_t*>(p) = static_cast<uint64_t>(v);
            break;
        case OptionKind::Switch:
            *static_cast<bool*>(p) = v != 0.0;
            break;
        case OptionKind::Choice:
        case OptionKind::Text:
            throw Error("internal: " + std::string(s.flag) + " is not a number");
    }
}

}  // namespace llada::decode
