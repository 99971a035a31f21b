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

#include "decode/options.h"
#include "decode/registry.h"
#include "kernels/kernels.h"
#include "tokenizer/chat.h"
#include "util/error.h"

namespace llada::tools {
namespace fs = std::filesystem;

void add_option(ArgTable& args, const decode::OptionSpec& s, void* out, const std::string& help) {
    using K = decode::OptionKind;
    const std::string& h = help.empty() ? s.help : help;
    switch (s.kind) {
        case K::Int:
            args.integer({s.flag}, s.metavar, h, static_cast<int*>(out),
                         static_cast<long long>(s.lo), static_cast<long long>(s.hi));
            break;
        case K::Real:
            args.real({s.flag}, s.metavar, h, static_cast<double*>(out), s.lo, s.hi);
            break;
        case K::Seed:
            args.integer({s.flag}, s.metavar, h, static_cast<uint64_t*>(out),
                         static_cast<unsigned long long>(s.lo),
                         static_cast<unsigned long long>(s.hi));
            break;
        case K::Switch:
            args.flag({s.flag}, h, static_cast<bool*>(out));
            break;
        case K::Count:  // "auto|N": the text, parsed by parse_count
        case K::Choice:
        case K::Text:
            args.string({s.flag}, s.metavar, h, static_cast<std::string*>(out));
            break;
    }
}

int parse_count(const decode::OptionSpec& s, const std::string& value, const char* what) {
    return parse_auto_count(s.flag, value, static_cast<int>(s.lo), static_cast<int>(s.hi), what);
}

void DecodeFlags::add_to(ArgTable& args) {
    args.section("Decoding");
    std::string names;
    for (const auto& n : decode::policy_names())
        names += (names.empty() ? "" : ", ") + n;
    args.string({"--policy"}, "NAME",
                "decoding policy: " + names + "\n(default: " + policy_default_help + ")", &policy);
    // The options the tool keeps itself (words it parses in finish(), switches that are not
    // fields of GenerateOptions); every other option is written into `opt` in place.
    const std::pair<const char*, void*> own[] = {
        {"--remasking", &remasking},
        {"--early-stop", &early_stop},
        {"--no-early-stop", &no_early_stop},
        {"--lut-exp", &lut_exp},
        {"--lut-dequant", &lut_dequant},
        {"--kv-f16", &kv_f16},
        {"--lookahead", &lookahead},
        {"--draft-input", &draft_input},
        {"--calibrate", &calibrate},
        {"--pipeline-verify", &pipeline_verify},
        {"--revise-mode", &revise_mode},
        {"--revise-rows", &revise_rows},
        {"--revise-context", &revise_context},
        {"--need-refresh", &need_refresh},
        {"--revise-tail", &revise_tail},
        {"--revise-serial", &revise_serial},
        {"--tts", &tts_arg},
        {"--select", &select},
        {"--full-last-layer", &full_last_layer},
        {"--full-logits", &full_logits},
    };
    std::string section = "Decoding";
    for (const decode::OptionSpec& s : decode::decode_options()) {
        if (s.section != section) args.section(section = s.section);
        void* out = nullptr;
        for (const auto& [flag, p] : own) {
            if (std::string_view(flag) == s.flag) out = p;
        }
        if (out == nullptr && s.place != nullptr) out = s.place(opt);
        if (out == nullptr) throw Error(std::string("internal: no storage for ") + s.flag);
        add_option(args, s, out);
    }
}

void DecodeFlags::finish(const ArgTable& args, const model::Model& model) {
    const auto& g = model.gguf();
    // A causal model is decoded token by token unless the user asks otherwise.
    if (!args.given("--policy") && model.hparams().causal) policy = "ar";
    // A block-causal model (LLaDA 2.x) is decoded as its authors decode it.
    const bool block_causal = model.hparams().attention_block > 0;
    if (!args.given("--policy") && block_causal) policy = "llada2";
    if (!args.given("--policy") && !model.hparams().causal && !block_causal && default_threshold &&
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
        // (A block-causal model's blocks are its attention blocks, whatever --gen is.)
        if (opt.gen % opt.block != 0 && !block_causal) opt.block = opt.gen;
    }
    if (!args.given("--steps")) opt.steps = opt.gen;
    // 0 is the "not given" value inside the options; given on the command line it would
    // silently mean the policy's default.
    check_commit_rule_flags(args, opt.threshold, opt.factor);
    const decode::PolicyInfo& info = decode::policy_info(policy);
    // An option of a group the policy does not take is refused with the registry's words (the
    // server's request parser says the same); the diffusion policies' commit rule, steps,
    // revision and self-checks are refused by the step engine's own checks, which say why.
    for (const decode::OptionSpec& s : decode::decode_options()) {
        if (args.given(s.flag) && !s.taken_by(info) && !decode::engine_refuses(info, s.takes()) &&
            !defaults_for_any_policy)
            throw Error(decode::not_taken(s.flag, s.takes(), info));
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
    if (early_stop && no_early_stop)
        throw Error("give only one of --early-stop and --no-early-stop");
    opt.early_stop = early_stop ? 1 : no_early_stop ? 0 : -1;
    opt.fused_sampling = !full_logits;
    opt.kernels.lut_exp = lut_exp;
    opt.kernels.lut_dequant = lut_dequant;
    opt.kernels.kv_f16 = kv_f16;
    opt.kernels.full_last_layer = full_last_layer;
    if (info.takes_option(decode::Takes::DreamSampler)) {
        // --top-k is Dream's sampler's own filter there.
        opt.dream.top_k = opt.filter.top_k;
        opt.filter.top_k = 0;
        if (args.given("--min-p"))
            throw Error(
                "--min-p does not apply to --policy dream (Dream's sampler filters with "
                "--top-k and --top-p)");
    }
    opt.lookahead = parse_count(decode::option("--lookahead"), lookahead, "a row count >= 0");
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
    if (need_refresh == "once") {
        opt.need_refresh = decode::NeedRefresh::Once;
    } else if (need_refresh == "suffix") {
        opt.need_refresh = decode::NeedRefresh::Suffix;
    } else if (need_refresh == "block") {
        opt.need_refresh = decode::NeedRefresh::Block;
    } else {
        throw Error("--need-refresh must be once, suffix or block, got '" + need_refresh + "'");
    }
    if (revise_tail != "cpu" && revise_tail != "dense") {
        throw Error("--revise-tail must be cpu or dense, got '" + revise_tail + "'");
    }
    opt.revise.tail_dense = revise_tail == "dense";
    if (!tts_arg.empty())
        tts = parse_count(decode::option("--tts"), tts_arg, "a count in [1, 4096]");
    if (args.given("--select") && tts == 0) throw Error("--select applies to --tts N");
    if (select != "vote" && select != "confidence")
        throw Error("--select must be vote or confidence, got '" + select + "'");
    opt.revise.rows = parse_count(decode::option("--revise-rows"), revise_rows, "a row count >= 0");
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
