// The command-line flags the tools share: decoding (DecodeFlags) and the device (DeviceFlags).
#include "tools/common.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "decode/registry.h"
#include "kernels/kernels.h"
#include "tokenizer/chat.h"
#include "util/error.h"

namespace llada::tools {
namespace fs = std::filesystem;

void DecodeFlags::add_to(ArgTable& args) {
    args.section("Decoding");
    std::string names;
    for (const auto& n : decode::policy_names())
        names += (names.empty() ? "" : ", ") + n;
    args.string({"--policy"}, "NAME",
                "decoding policy: " + names + "\n(default: " + policy_default_help + ")", &policy);
    args.integer({"--gen"}, "N",
                 "generated positions (default: the model's recommendation, else 128)", &opt.gen, 1,
                 1 << 20);
    args.integer({"--steps"}, "N", "denoising steps in total (default: --gen, one token per step)",
                 &opt.steps, 1, 1 << 20);
    args.integer({"--block"}, "N", "block length (default: the model's recommendation, else 32)",
                 &opt.block, 1, 1 << 20);
    args.real({"--temperature"}, "T", "Gumbel-max sampling temperature; 0 = argmax (default 0)",
              &opt.temperature, 0.0, 1e6);
    args.integer({"--top-k"}, "K",
                 "with --temperature > 0: sample among the K most likely tokens; 0 = off\n"
                 "(default; also Dream's sampler's filter)",
                 &top_k, 0, 1 << 30);
    args.real({"--min-p"}, "P",
              "with --temperature > 0: sample among the tokens at least P times as likely as\n"
              "the most likely one (after --top-k); 0 = off (default)",
              &opt.filter.min_p, 0.0, 1.0);
    args.real({"--cfg"}, "W", "classifier-free guidance scale; 0 = off (default 0)", &opt.cfg, 0.0,
              1e6);
    args.string({"--remasking"}, "MODE", "low_confidence (default) or random", &remasking);
    args.integer({"--seed"}, "S", "seed of the sampling noise (default 0)", &seed, 0, INT_MAX);
    args.real({"--threshold"}, "TAU",
              "parallel commits: every masked position of the block with confidence >= TAU\n"
              "(at least one per step); with --policy threshold, prefix-cache or dual-cache,\n"
              "e.g. --policy dual-cache --threshold 0.9 (policy threshold defaults to " +
                  number_str(decode::kDefaultThreshold) + ")",
              &opt.threshold, 0.0, 1.0);
    args.real({"--factor"}, "F",
              "parallel commits by the factor rule: the n-th most confident position needs\n"
              ">= 1 - F/(n+1); instead of --threshold",
              &opt.factor, 0.0, 1e6);
    args.integer({"--refresh"}, "N",
                 "cache policies: also refresh every K/V with a full forward every N steps\n"
                 "within a block (default 0: only at each block start)",
                 &opt.refresh, 0, 1 << 20);
    args.flag({"--early-stop"},
              "stop once a finished block holds end-of-text (default for all but vanilla)",
              &early_stop);
    args.flag({"--no-early-stop"}, "decode every block even after end-of-text", &no_early_stop);
    args.flag({"--lut-exp"}, "attention softmax through a 32,768-entry exp table (fp16 inputs)",
              &lut_exp);
    args.flag({"--lut-dequant"},
              "Q4_0 matmuls dequantise through 16-entry tables with float activations\n"
              "(instead of int8 dot products on Q8-quantised activations)",
              &lut_dequant);
    args.flag({"--kv-f16"},
              "keep the KV cache in fp16 (half its memory and half the bytes attention reads;\n"
              "llama.cpp's default cache type) instead of float32; keys and values beyond\n"
              "+-65504 become infinite there, as in llama.cpp",
              &kv_f16);
    args.section("Multi-block speculation (--policy mbsd)");
    args.string({"--lookahead"}, "auto|N",
                "lookahead rows from the next block(s) per step: auto (default) sizes it from\n"
                "the device's latency table (npu-sim) or this host's calibrated forward cost;\n"
                "N forces N (0: the same policy without speculation, i.e. --policy need)",
                &lookahead);
    args.real({"--lookahead-mem"}, "MIB",
              "auto lookahead: cap the window's activation memory at MIB (default: no cap)",
              &opt.lookahead_mem_mb, 0.0, 1e9);
    args.real({"--accept"}, "P",
              "accept a draft when its block's first forward predicts the same token with\n"
              "confidence >= P (default 0.5); rejected drafts return to masked",
              &opt.accept, 0.0, 1.0);
    args.string({"--draft-input"}, "mask|token",
                "what draft rows feed the window: the mask token (default) or the draft token",
                &draft_input);
    args.flag({"--calibrate"},
              "measure this host's forward cost by row count again (auto lookahead on cpu)",
              &calibrate);
    args.section("Pipelined blocks (--policy pipeline)");
    args.real({"--pipeline-start"}, "S",
              "a later block starts decoding beside the current one once a share S of the\n"
              "block before it is committed (default 0: from the first step; 1: never,\n"
              "i.e. --policy need)",
              &opt.pipeline_start, 0.0, 1.0);
    args.real({"--pipeline-threshold"}, "TAU",
              "a block decoding ahead commits its positions with confidence >= TAU\n"
              "(default: --threshold's default)",
              &opt.pipeline_threshold, 0.0, 1.0);
    args.integer({"--pipeline-min"}, "N",
                 "... and at least its N most confident positions each step (default 0)",
                 &opt.pipeline_min, 0, 1 << 20);
    args.real({"--pipeline-accept"}, "P",
              "a position committed ahead counts when its check predicts the same token with\n"
              "confidence >= P (default 0.5); else it is masked again",
              &opt.pipeline_accept, 0.0, 1.0);
    args.integer({"--pipeline-depth"}, "N",
                 "blocks that may decode ahead of the current one, each starting once the block\n"
                 "before it is --pipeline-start along (default 3)",
                 &opt.pipeline_depth, 1, 1 << 20);
    args.string({"--pipeline-verify"}, "mask|shadow|window",
                "how an ahead commit is checked: shadow (default: a check row blind to the token\n"
                "beside it, so the checks of several blocks share one forward, kept while they\n"
                "pass in order), mask (its block's first forward feeds the mask there) or\n"
                "window (the next forward feeds the mask there, every block at once)",
                &pipeline_verify);
    args.section("Progressive revision (--revise; policies threshold, dual-cache, mbsd, ...)");
    args.flag({"--revise"},
              "keep committed tokens revisable: a check row (the mask at the position, which\n"
              "sees a mask there instead of the token) re-checks each visible token every\n"
              "step on a CPU path beside the dense window, until it is stable\n"
              "(docs/step-engine.md)",
              &opt.revise.on);
    args.string({"--revise-mode"}, "MODE",
                "a revised token becomes the check's argmax (replace, default) or masked\n"
                "again (remask)",
                &revise_mode);
    args.real({"--revise-margin"}, "M",
              "revise when another token beats the committed one by M in probability\n"
              "(default 0.5; above 1: never)",
              &opt.revise.margin, 0.0, 1e6);
    args.real({"--revise-floor"}, "P",
              "revise when the committed token's re-evaluated probability is below P\n"
              "(default 0.02)",
              &opt.revise.floor, 0.0, 1.0);
    args.real({"--stable-p"}, "P",
              "a check passes when the token's re-evaluated probability is >= P (default 0.9)",
              &opt.revise.stable, 0.0, 1.0);
    args.integer({"--stable-k"}, "K",
                 "stable after K passing checks in a row (default 2; 0: when committed)",
                 &opt.revise.stable_k, 0, 1 << 20);
    args.integer({"--stable-budget"}, "N",
                 "stable at the latest N steps after its first commit (default 8)",
                 &opt.revise.budget, 1, 1 << 20);
    args.string({"--revise-rows"}, "auto|N",
                "CPU-path rows per step: 0 = check every visible token (default), N = at most\n"
                "N (refreshes, then the leftmost tokens), auto = what the projected CPU lane\n"
                "finishes within the dense step (a projected device)",
                &revise_rows);
    args.string({"--revise-context"}, "fresh|snapshot",
                "what a check sees of last step's commits: their K/V recomputed on the CPU\n"
                "path (fresh, default) or the cache as it is (snapshot: fewer CPU rows)",
                &revise_context);
    args.string({"--revise-tail"}, "cpu|dense",
                "after the last block, the checks left: on the CPU path (cpu, default) or as\n"
                "forwards of the dense device, which idles then (dense)",
                &revise_tail);
    args.integer({"--revise-threads"}, "N", "threads of the CPU path's own pool (default 1)",
                 &opt.revise.threads, 1, 256);
    args.flag({"--revise-serial"},
              "run the CPU path after the dense forward on the same thread (for comparison)",
              &revise_serial);
    args.section("Self-checks (--self-check; policies need, mbsd)");
    args.flag({"--self-check"},
              "the rows that recompute a committed token's K/V also predict it, and a\n"
              "prediction of another token replaces it: checks that cost no forward row,\n"
              "for a model trained to judge the tokens it is fed (tiny-llada-lc;\n"
              "docs/step-engine.md)",
              &opt.self_check.on);
    args.real({"--self-check-accept"}, "P",
              "replace a token when its refresh row predicts another one with probability\n"
              ">= P (default 0.75)",
              &opt.self_check.accept, 0.0, 1.0);
    args.real({"--self-check-below"}, "P",
              "check the tokens committed with confidence below P (default 0.99; 1: every\n"
              "token), those a check replaced, and those committed in a replacement's step",
              &opt.self_check.below, 0.0, 1.0);
    args.real({"--self-check-threshold"}, "TAU",
              "the commit threshold of every block but the last (a later forward checks\n"
              "them; default: --threshold)",
              &opt.self_check.threshold, 0.0, 1.0);
    args.section("Dream's sampler (--policy dream)");
    args.string({"--dream-alg"}, "ALG",
                "origin, maskgit_plus, topk_margin or entropy (default entropy): which masked\n"
                "positions a step fills (docs/dream-decoding.md)",
                &opt.dream.alg);
    args.real({"--alg-temp"}, "T",
              "draw the positions from softmax(confidence / T) instead of taking the most\n"
              "confident (default 0)",
              &opt.dream.alg_temp, 0.0, 1e6);
    args.real({"--eps"}, "E", "the schedule's end: linspace(1, E, steps + 1) (default 0.001)",
              &opt.dream.eps, 0.0, 1.0);
    args.real({"--top-p"}, "P", "nucleus filter before sampling; 1 = off (default)",
              &opt.dream.top_p, 0.0, 1.0);
    args.section("Test-time scaling");
    args.string({"--tts"}, "auto|N",
                "decode N candidates of the prompt together (seeds --seed .. --seed+N-1; give\n"
                "--temperature > 0 or --remasking random for diversity) and choose one; auto:\n"
                "as many as a step's window holds for about one's price (npu-sim)",
                &tts_arg);
    args.string({"--select"}, "vote|confidence",
                "--tts: the majority answer (ties by mean confidence; default) or the candidate\n"
                "with the highest mean committed confidence",
                &select);
    args.section("Kernels and memory");
    args.flag({"--full-last-layer"},
              "run the last layer on every window row (default: only the rows whose\n"
              "prediction is wanted go past its K/V store, as llama.cpp does)",
              &full_last_layer);
    args.flag({"--full-logits"},
              "write vocabulary-wide logits rows instead of the fused LM-head reduction",
              &full_logits);
}

namespace {

// The flags of each option group of decode/registry.h.
constexpr std::pair<const char*, decode::Takes> kOptionGroups[] = {
    {"--block", decode::Takes::Blocks},
    {"--steps", decode::Takes::Steps},
    {"--threshold", decode::Takes::CommitRule},
    {"--factor", decode::Takes::CommitRule},
    {"--refresh", decode::Takes::Refresh},
    {"--revise", decode::Takes::Revise},
    {"--self-check", decode::Takes::SelfCheck},
    {"--lookahead", decode::Takes::Lookahead},
    {"--lookahead-mem", decode::Takes::Lookahead},
    {"--accept", decode::Takes::Lookahead},
    {"--draft-input", decode::Takes::Lookahead},
    {"--calibrate", decode::Takes::Lookahead},
    {"--pipeline-start", decode::Takes::Pipeline},
    {"--pipeline-threshold", decode::Takes::Pipeline},
    {"--pipeline-min", decode::Takes::Pipeline},
    {"--pipeline-accept", decode::Takes::Pipeline},
    {"--pipeline-depth", decode::Takes::Pipeline},
    {"--pipeline-verify", decode::Takes::Pipeline},
    {"--dream-alg", decode::Takes::DreamSampler},
    {"--alg-temp", decode::Takes::DreamSampler},
    {"--eps", decode::Takes::DreamSampler},
    {"--top-p", decode::Takes::DreamSampler},
};

}  // namespace

void DecodeFlags::finish(const ArgTable& args, const model::Model& model) {
    const auto& g = model.gguf();
    // A causal model is decoded token by token unless the user asks otherwise.
    if (!args.given("--policy") && model.hparams().causal) policy = "ar";
    if (!args.given("--policy") && !model.hparams().causal && default_threshold &&
        !args.given("--threshold") && !args.given("--factor"))
        opt.threshold = decode::kDefaultThreshold;
    // The file's recommendation for a flag not given; `flag` overrides a bad one.
    auto hint = [&](const char* key, const char* flag, int fallback) {
        auto v = g.opt_uint(key);
        if (!v) return fallback;
        if (*v == 0 || *v >= (1u << 20)) {
            throw Error("the model file's " + std::string(key) + " is " + std::to_string(*v) +
                        ", outside 1 .. 1048575; give " + flag + " to decode it anyway");
        }
        return static_cast<int>(*v);
    };
    if (!args.given("--gen")) opt.gen = hint("llada_cpp.gen_length", "--gen", 128);
    if (!args.given("--block")) {
        opt.block = hint("llada_cpp.block_length", "--block", 32);
        if (opt.gen % opt.block != 0) opt.block = opt.gen;
    }
    if (!args.given("--steps")) opt.steps = opt.gen;
    // 0 is the "not given" value inside the options; given on the command line it would
    // silently mean the policy's default.
    check_commit_rule_flags(args, opt.threshold, opt.factor);
    const decode::PolicyInfo& info = decode::policy_info(policy);
    // An option of a group the policy does not take is refused with the registry's words (the
    // server's request parser says the same); the diffusion policies' commit rule, steps,
    // revision and self-checks are refused by the step engine's own checks, which say why.
    for (const auto& [flag, group] : kOptionGroups) {
        if (args.given(flag) && !info.takes_option(group) && !decode::engine_refuses(info, group) &&
            !defaults_for_any_policy)
            throw Error(decode::not_taken(flag, group, info));
    }
    if (args.given("--steps") && (opt.threshold > 0.0 || opt.factor > 0.0 || info.parallel_only)) {
        throw Error(
            "--steps applies to the step schedule; with a parallel commit rule "
            "(--threshold, --factor, --policy threshold or pipeline) a block takes as many steps "
            "as "
            "it needs");
    }
    if (remasking == "low_confidence") {
        opt.remasking = decode::Remasking::LowConfidence;
    } else if (remasking == "random") {
        opt.remasking = decode::Remasking::Random;
    } else {
        throw Error("--remasking must be low_confidence or random, got '" + remasking + "'");
    }
    opt.seed = static_cast<uint64_t>(seed);
    if (early_stop && no_early_stop)
        throw Error("give only one of --early-stop and --no-early-stop");
    opt.early_stop = early_stop ? 1 : no_early_stop ? 0 : -1;
    opt.fused_sampling = !full_logits;
    opt.kernels.lut_exp = lut_exp;
    opt.kernels.lut_dequant = lut_dequant;
    opt.kernels.kv_f16 = kv_f16;
    opt.kernels.full_last_layer = full_last_layer;
    if (info.takes_option(decode::Takes::DreamSampler)) {
        opt.dream.top_k = top_k;
        if (args.given("--min-p"))
            throw Error(
                "--min-p does not apply to --policy dream (Dream's sampler filters with "
                "--top-k and --top-p)");
    } else {
        opt.filter.top_k = top_k;
    }
    opt.lookahead = parse_auto_count("--lookahead", lookahead, 0, 1 << 20, "a row count >= 0");
    if (draft_input == "mask") {
        opt.draft_input = decode::DraftInput::Mask;
    } else if (draft_input == "token") {
        opt.draft_input = decode::DraftInput::Token;
    } else {
        throw Error("--draft-input must be mask or token, got '" + draft_input + "'");
    }
    if (!decode::parse_pipeline_verify(pipeline_verify, opt.pipeline_verify))
        throw Error("--pipeline-verify must be mask, shadow or window, got '" + pipeline_verify +
                    "'");
    if (calibrate && opt.lookahead >= 0)
        throw Error("--calibrate measures the cost that --lookahead auto sizes with; --lookahead " +
                    lookahead + " needs none");
    opt.recalibrate = calibrate;
    for (const char* f : {"--revise-mode", "--revise-margin", "--revise-floor", "--stable-p",
                          "--stable-k", "--stable-budget", "--revise-threads", "--revise-serial",
                          "--revise-rows", "--revise-context", "--revise-tail"}) {
        if (args.given(f) && !opt.revise.on) {
            throw Error(std::string(f) + " is a setting of --revise; give --revise too");
        }
    }
    for (const char* f : {"--self-check-accept", "--self-check-below", "--self-check-threshold"}) {
        if (args.given(f) && !opt.self_check.on) {
            throw Error(std::string(f) + " is a setting of --self-check; give --self-check too");
        }
    }
    if (revise_mode == "replace") {
        opt.revise.mode = decode::ReviseMode::Replace;
    } else if (revise_mode == "remask") {
        opt.revise.mode = decode::ReviseMode::Remask;
    } else {
        throw Error("--revise-mode must be replace or remask, got '" + revise_mode + "'");
    }
    opt.revise.serial = revise_serial;
    if (revise_context != "fresh" && revise_context != "snapshot") {
        throw Error("--revise-context must be fresh or snapshot, got '" + revise_context + "'");
    }
    opt.revise.fresh_context = revise_context == "fresh";
    if (revise_tail != "cpu" && revise_tail != "dense") {
        throw Error("--revise-tail must be cpu or dense, got '" + revise_tail + "'");
    }
    opt.revise.tail_dense = revise_tail == "dense";
    if (!tts_arg.empty()) tts = parse_auto_count("--tts", tts_arg, 1, 4096, "a count in [1, 4096]");
    if (args.given("--select") && tts == 0) throw Error("--select applies to --tts N");
    if (select != "vote" && select != "confidence")
        throw Error("--select must be vote or confidence, got '" + select + "'");
    opt.revise.rows =
        parse_auto_count("--revise-rows", revise_rows, 0, 1 << 20, "a row count >= 0");
}

int parse_auto_count(const char* flag, const std::string& value, int lo, int hi, const char* what) {
    if (value == "auto") return -1;
    char* end = nullptr;
    const long v = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v < lo || v > hi) {
        throw Error(std::string(flag) + " must be 'auto' or " + what + ", got '" + value + "'");
    }
    return static_cast<int>(v);
}

void DecodeFlags::set_calibration_file(const std::string& model_path, int threads) {
    std::string dir;
    if (const char* d = std::getenv("LLADA_CACHE_DIR"); d && *d) {
        dir = d;
    } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
        dir = std::string(x) + "/llada.cpp";
    } else if (const char* h = std::getenv("HOME"); h && *h) {
        dir = std::string(h) + "/.cache/llada.cpp";
    }
    if (dir.empty()) return;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return;  // no cache: calibrate in memory
    opt.calibration_file =
        (fs::path(dir) / ("forward-cost-" + fs::path(model_path).stem().string() + "-t" +
                          std::to_string(threads) + ".txt"))
            .string();
}

int resolve_tts(const DecodeFlags& dec, const model::Model& model, runtime::Device& device,
                int prompt_len) {
    if (dec.tts >= 0) return dec.tts;
    double ms = 0.0;
    const int n = decode::auto_candidates(dec.policy, model, device, dec.opt, prompt_len, 16, &ms);
    std::fprintf(stderr,
                 "--tts auto: %d candidates (a step of all of them projects to %.2f ms, within "
                 "1.1x of one candidate's)\n",
                 n, ms);
    return n;
}

void DeviceFlags::add_to(ArgTable& args) {
    this->args = &args;
    args.section("Device");
    args.string({"--device"}, "NAME",
                "cpu (default) or npu-sim (the simulated NPU: matrix work on the NPU,\n"
                "vocabulary-wide work on the CPU, times projected by a cost model)",
                &config.device);
    args.string({"--npu-profile"}, "NAME",
                "npu-sim: sm8750 (default), sm8650, sm8550 (2 GiB window);\n"
                "cpu: sm8750-cpu projects the CPU run onto the phone's CPU",
                &config.profile);
    args.string({"--npu-memory"}, "POLICY",
                "npu-sim weight memory: optimised (default: resident weights plus a ring of\n"
                "streamed layers, prefetched) or baseline (map each tensor on use, unmap\n"
                "the least recently used when the window is full)",
                &config.memory);
    args.string({"--npu-weights"}, "RECIPE",
                "npu-sim tile formats: model (<= 4-bit formats such as Q4_0, Q4_K, IQ4_XS\n"
                "-> TQ4, 5-8 bits -> TQ8, float -> TF16; default) or tq4 (TQ4, TQ8 for FFN\n"
                "down)",
                &config.weights);
    args.string({"--npu-set"}, "K=V,...",
                "override profile parameters, e.g. map_fixed_us=500,window_gib=2",
                &config.overrides);
    args.string({"--npu-buckets"}, "LIST",
                "npu-sim static row shapes (default: every multiple of 32)", &buckets);
    args.flag({"--timing-only"}, "project times without computing (outputs are placeholders)",
              &config.timing_only);
    args.string({"--simd"}, "NAME",
                "run the CPU kernels of this instruction set instead of the best one, e.g.\n"
                "AVX2 to time a machine without AVX-512 (names: Highway's targets)",
                &simd);
}

std::unique_ptr<runtime::Device> DeviceFlags::make(runtime::ThreadPool& pool) const {
    if (!simd.empty()) kernels::limit_simd(simd);
    runtime::DeviceConfig c = config;
    if (c.device == "cpu" && args != nullptr) {
        // Given explicitly, even with the default value, they ask for something cpu ignores.
        for (const char* f : {"--npu-memory", "--npu-weights", "--npu-buckets"}) {
            if (args->given(f)) throw Error(std::string(f) + " applies to --device npu-sim");
        }
    }
    c.buckets.clear();
    std::stringstream ss(buckets);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        char* end = nullptr;
        const long long v = std::strtoll(item.c_str(), &end, 10);
        if (*end != '\0' || v <= 0) throw Error("--npu-buckets: '" + item + "' is not a row count");
        c.buckets.push_back(v);
    }
    return runtime::make_device(c, pool);
}

}  // namespace llada::tools
