// Pieces shared by the command-line tools.
#include "tools/common.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "kernels/kernels.h"
#include "tokenizer/chat.h"
#include "util/error.h"

namespace llada::tools {
namespace fs = std::filesystem;

std::vector<std::string> default_model_candidates(const char* argv0) {
    std::vector<std::string> dirs;
    if (const char* env = std::getenv("LLADA_MODELS_DIR"); env && *env) dirs.push_back(env);
    // The executable's own location, so an installed tree is found wherever it was moved.
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    fs::path exe = n > 0 ? fs::path(std::string(buf, static_cast<size_t>(n))) : fs::path(argv0);
    dirs.push_back((exe.parent_path() / ".." / "share" / "llada.cpp" / "models").string());
    dirs.push_back(LLADA_MODELS_INSTALL_DIR);
    dirs.push_back(LLADA_SOURCE_MODELS_DIR);
    std::vector<std::string> out;
    for (const auto& d : dirs)
        out.push_back((fs::path(d) / kDefaultModel).lexically_normal());
    return out;
}

std::string find_default_model(const char* argv0) {
    auto candidates = default_model_candidates(argv0);
    for (const auto& c : candidates) {
        if (fs::exists(c)) return c;
    }
    std::string where;
    for (const auto& c : candidates)
        where += "\n  " + c;
    throw Error(std::string("no model given (-m) and the bundled model ") + kDefaultModel +
                " was not found; looked in:" + where);
}

LoadedModel load_model(const std::string& path) {
    LoadedModel lm;
    lm.model = model::Model::load(path);
    lm.tok =
        std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_gguf(lm.model->gguf()));
    // More tokens than embedding rows: the tokenizer could hand the model ids it has no row for.
    // (Fewer is normal: converters pad the embedding to a round size, Qwen2's and Dream's by
    // hundreds of rows.)
    if (lm.tok->n_vocab() > lm.model->hparams().n_vocab) {
        throw Error("'" + path + "': the tokenizer has " + std::to_string(lm.tok->n_vocab()) +
                    " tokens but the model's vocabulary has " +
                    std::to_string(lm.model->hparams().n_vocab) + " rows");
    }
    lm.ids.mask = lm.tok->mask();
    lm.ids.eos = lm.tok->eos();
    lm.ids.eot = lm.tok->eot();
    if (lm.tok->n_vocab() < lm.model->hparams().n_vocab)
        lm.ids.n_spellable = static_cast<int32_t>(lm.tok->n_vocab());
    return lm;
}

std::vector<int32_t> chat_encode(const tokenizer::Tokenizer& tok, const std::string& user) {
    try {
        return tokenizer::ChatTemplate::from_tokenizer(tok).encode(tok, {{"user", user}});
    } catch (const Error& e) {
        throw Error(std::string("--chat: ") + e.what());
    }
}

std::vector<int32_t> problem_ids(const tokenizer::Tokenizer& tok, const std::string& prompt,
                                 bool chat) {
    return chat ? chat_encode(tok, prompt) : tok.encode(prompt, tok.add_bos_default(), false);
}

void DecodeFlags::add_to(ArgTable& args) {
    args.section("Decoding");
    std::string names;
    for (const auto& n : decode::policy_names())
        names += (names.empty() ? "" : ", ") + n;
    args.string(
        {"--policy"}, "NAME",
        "decoding policy: " + names + "\n(default: vanilla, or ar for an autoregressive model)",
        &policy);
    args.integer({"--gen"}, "N",
                 "generated positions (default: the model's recommendation, else 128)", &opt.gen, 1,
                 1 << 20);
    args.integer({"--steps"}, "N", "denoising steps in total (default: --gen, one token per step)",
                 &opt.steps, 1, 1 << 20);
    args.integer({"--block"}, "N", "block length (default: the model's recommendation, else 32)",
                 &opt.block, 1, 1 << 20);
    args.real({"--temperature"}, "T", "Gumbel-max sampling temperature; 0 = argmax (default 0)",
              &opt.temperature, 0.0, 1e6);
    args.real({"--cfg"}, "W", "classifier-free guidance scale; 0 = off (default 0)", &opt.cfg, 0.0,
              1e6);
    args.string({"--remasking"}, "MODE", "low_confidence (default) or random", &remasking);
    args.integer({"--seed"}, "S", "seed of the sampling noise (default 0)", &seed, 0, INT_MAX);
    args.real({"--threshold"}, "TAU",
              "parallel commits: every masked position of the block with confidence >= TAU\n"
              "(at least one per step); with --policy threshold, prefix-cache or dual-cache,\n"
              "e.g. --policy dual-cache --threshold 0.9 (policy threshold defaults to 0.9)",
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
    args.integer({"--revise-threads"}, "N", "threads of the CPU path's own pool (default 1)",
                 &opt.revise.threads, 1, 256);
    args.flag({"--revise-serial"},
              "run the CPU path after the dense forward on the same thread (for comparison)",
              &revise_serial);
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
    args.integer({"--top-k"}, "K", "keep the K largest logits before sampling; 0 = off (default)",
                 &opt.dream.top_k, 0, 1 << 30);
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

void DecodeFlags::finish(const ArgTable& args, const model::Model& model) {
    const auto& g = model.gguf();
    // A causal model is decoded token by token unless the user asks otherwise.
    if (!args.given("--policy") && model.hparams().causal) policy = "ar";
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
    if (args.given("--threshold") && opt.threshold == 0.0) {
        throw Error(
            "--threshold 0 is not a threshold: give TAU in (0, 1], or leave it out for "
            "the policy's default (threshold: 0.9)");
    }
    if (args.given("--factor") && opt.factor == 0.0)
        throw Error("--factor 0 is not a factor: give F > 0, or leave it out");
    if (args.given("--steps") &&
        (opt.threshold > 0.0 || opt.factor > 0.0 || policy == "threshold")) {
        throw Error(
            "--steps applies to the step schedule; with a parallel commit rule "
            "(--threshold, --factor, --policy threshold) a block takes as many steps as "
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
    const bool mbsd = policy == "mbsd";
    for (const char* f : {"--dream-alg", "--alg-temp", "--eps", "--top-p", "--top-k"}) {
        if (args.given(f) && policy != "dream") {
            throw Error(std::string(f) + " applies to --policy dream, not " + policy);
        }
    }
    if (policy == "dream" && args.given("--block"))
        throw Error(
            "--block does not apply to --policy dream: Dream decodes the canvas as one span");
    for (const char* f :
         {"--lookahead", "--lookahead-mem", "--accept", "--draft-input", "--calibrate"}) {
        if (args.given(f) && !mbsd) {
            throw Error(std::string(f) + " applies to --policy mbsd, not " + policy);
        }
    }
    opt.lookahead = parse_auto_count("--lookahead", lookahead, 0, 1 << 20, "a row count >= 0");
    if (draft_input == "mask") {
        opt.draft_input = decode::DraftInput::Mask;
    } else if (draft_input == "token") {
        opt.draft_input = decode::DraftInput::Token;
    } else {
        throw Error("--draft-input must be mask or token, got '" + draft_input + "'");
    }
    if (calibrate && opt.lookahead >= 0)
        throw Error("--calibrate measures the cost that --lookahead auto sizes with; --lookahead " +
                    lookahead + " needs none");
    opt.recalibrate = calibrate;
    for (const char* f : {"--revise-mode", "--revise-margin", "--revise-floor", "--stable-p",
                          "--stable-k", "--stable-budget", "--revise-threads", "--revise-serial",
                          "--revise-rows", "--revise-context"}) {
        if (args.given(f) && !opt.revise.on) {
            throw Error(std::string(f) + " is a setting of --revise; give --revise too");
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
    if (!tts_arg.empty()) tts = parse_auto_count("--tts", tts_arg, 1, 4096, "a count in [1, 4096]");
    if (args.given("--select") && tts == 0) throw Error("--select applies to --tts N");
    if (select != "vote" && select != "confidence")
        throw Error("--select must be vote or confidence, got '" + select + "'");
    if (tts < 0 && policy == "ar") {
        throw Error("--tts auto sizes diffusion windows; give --tts N with --policy ar");
    }
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

nlohmann::json step_json(const decode::StepInfo& s) {
    return {{"step", s.step},
            {"block", s.block},
            {"committed", s.committed},
            {"rows", s.rows},
            {"rows_device", s.rows_device},
            {"lm_head_rows", s.lm_head_rows},
            {"lookahead", s.lookahead},
            {"drafts_proposed", s.drafts_proposed},
            {"drafts_accepted", s.drafts_accepted},
            {"drafts_accepted_early", s.drafts_accepted_early},
            {"drafts_rejected", s.drafts_rejected},
            {"revision",
             {{"checks", s.checks},
              {"refreshes", s.refreshes},
              {"revised", s.revised},
              {"remasked", s.remasked},
              {"stabilised", s.stabilised},
              {"dense", s.dense},
              {"cpu_ms", s.cpu_ms},
              {"exposed_ms", s.exposed_ms},
              {"projected_dense_ms", s.proj_dense_ms},
              {"projected_cpu_ms", s.proj_cpu_ms},
              {"projected_merge_ms", s.proj_merge_ms},
              {"projected_contention_ms", s.proj_contention_ms}}},
            {"states",
             {{"masked", s.n_masked},
              {"draft", s.n_draft},
              {"visible", s.n_visible},
              {"stable", s.n_stable}}},
            {"ms", s.ms}};
}

nlohmann::json revision_json(const decode::GenerateResult::Revision& r) {
    return {{"checks", r.checks},
            {"refreshes", r.refreshes},
            {"lane_only_steps", r.lane_only_steps},
            {"revisions", r.revisions},
            {"right_to_wrong", r.right_to_wrong},
            {"wrong_to_right", r.wrong_to_right},
            {"wrong_to_wrong", r.wrong_to_wrong},
            {"remasks", r.remasks},
            {"remasks_of_right", r.remasks_of_right},
            {"remasks_of_wrong", r.remasks_of_wrong},
            {"stabilised", r.stabilised},
            {"mean_steps_commit_to_stable",
             r.stabilised > 0 ? static_cast<double>(r.commit_to_stable_steps) / r.stabilised : 0.0},
            {"cpu_ms", r.cpu_ms},
            {"exposed_ms", r.exposed_ms},
            {"hidden_ms", r.cpu_ms - r.exposed_ms},
            {"projected_dense_ms", r.proj_dense_ms},
            {"projected_cpu_ms", r.proj_cpu_ms},
            {"projected_merge_ms", r.proj_merge_ms},
            {"projected_contention_ms", r.proj_contention_ms},
            {"projected_overlapped_ms", r.proj_step_ms}};
}

TtsChoice choose_candidate(const decode::CandidatesResult& c, const tokenizer::Tokenizer& tok,
                           const decode::TokenIds& ids, const std::string& select,
                           const std::function<std::string(const std::string&)>& extract) {
    TtsChoice t;
    for (const auto& r : c.candidates) {
        t.texts.push_back(tok.decode(r.answer(ids), false));
        t.answers.push_back(extract(t.texts.back()));
        t.confidence.push_back(r.mean_confidence());
    }
    t.vote = decode::select_by_vote(t.answers, t.confidence);
    t.by_confidence = decode::select_by_confidence(t.confidence);
    t.chosen = select == "confidence" ? t.by_confidence : t.vote;
    return t;
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

nlohmann::json tts_json(const TtsChoice& t, const std::string& select) {
    nlohmann::json cands = nlohmann::json::array();
    for (size_t i = 0; i < t.texts.size(); ++i) {
        cands.push_back(
            {{"text", t.texts[i]}, {"answer", t.answers[i]}, {"mean_confidence", t.confidence[i]}});
    }
    return {{"n", t.texts.size()},
            {"select", select},
            {"chosen", t.chosen},
            {"vote", t.vote},
            {"by_confidence", t.by_confidence},
            {"candidates", cands}};
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

nlohmann::json device_report_json(const runtime::DeviceReport& r) {
    nlohmann::json cats = nlohmann::json::object();
    for (int c = 0; c < npu::kCategories; ++c) {
        cats[npu::category_name(static_cast<npu::Category>(c))] = r.projected_us.us[c] / 1e3;
    }
    nlohmann::json j = {{"device", r.device},
                        {"profile", r.profile},
                        {"projected", r.projected},
                        {"functional", r.functional},
                        {"executions", r.executions},
                        {"ops_npu", r.ops_npu},
                        {"ops_cpu", r.ops_cpu},
                        {"rows", r.rows},
                        {"padded_rows", r.padded_rows},
                        {"buckets_compiled", r.buckets_compiled},
                        {"host_s", r.host_s}};
    if (r.projected) {
        j["projected_ms"] = r.projected_ms();
        j["projected_ms_by_category"] = cats;
        j["projected_npu_ms"] = r.npu_us / 1e3;
        j["projected_cpu_ms"] = r.cpu_us / 1e3;
        j["projected_one_time_ms"] = r.one_time_us / 1e3;
    }
    if (!r.memory_policy.empty()) {
        j["memory"] = {{"policy", r.memory_policy},
                       {"window_bytes", r.window_bytes},
                       {"window_peak_bytes", r.window_peak},
                       {"mappings", r.mappings},
                       {"unmappings", r.unmappings},
                       {"bytes_mapped", r.bytes_mapped},
                       {"bytes_copied", r.bytes_copied},
                       {"bytes_moved", r.bytes_moved()},
                       {"projected_stall_ms", r.stall_us() / 1e3},
                       {"projected_prefetch_ms", r.prefetch_us / 1e3},
                       {"fragmentation", r.fragmentation},
                       {"resident_bytes", r.resident_bytes},
                       {"streamed_bytes_per_forward", r.streamed_bytes},
                       {"ring_slots", r.ring_slots}};
    }
    return j;
}

nlohmann::json trace_json(const decode::GenerateResult& r, const decode::GenerateOptions& opt,
                          const std::string& source, const std::string& policy) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : r.steps) {
        // [block, committed, accepted, rejected, lookahead, rows, masked, draft, committed rows,
        //  accepted early, checks, revised, remasked]
        steps.push_back({s.block, s.committed, s.drafts_accepted, s.drafts_rejected, s.lookahead,
                         s.rows, s.rows_masked, s.rows_draft, s.rows_committed,
                         s.drafts_accepted_early, s.checks, s.revised, s.remasked});
    }
    return {{"trace", "llada.cpp decision trace v1"},
            {"source", source},
            {"policy", policy},
            {"prompt_len", r.prompt_len},
            {"gen", opt.gen},
            {"block", opt.block},
            {"threshold", opt.threshold},
            {"factor", opt.factor},
            {"stopped_early", r.stopped_early},
            {"nfe", r.stats.forwards},
            {"steps", steps}};
}

decode::DecisionTrace trace_from_json(const nlohmann::json& j) {
    if (!j.is_object() || j.value("trace", "") != "llada.cpp decision trace v1" ||
        !j.contains("steps") || !j["steps"].is_array()) {
        throw Error("not a llada.cpp decision trace (written by --trace-out)");
    }
    decode::DecisionTrace t;
    t.source = j.value("source", "");
    t.policy = j.value("policy", "");
    t.prompt_len = j.value("prompt_len", 0);
    t.gen = j.value("gen", 0);
    t.block = j.value("block", 0);
    t.stopped_early = j.value("stopped_early", false);
    t.parallel = j.value("threshold", 0.0) > 0.0 || j.value("factor", 0.0) > 0.0;
    if (t.gen <= 0 || t.block <= 0 || t.gen % t.block != 0)
        throw Error("decision trace: gen and block must be positive, gen a multiple of block");
    for (const auto& s : j["steps"]) {
        if (!s.is_array() || (s.size() != 10 && s.size() != 13))
            throw Error("decision trace: a step is not 10 (or 13, with revision) numbers");
        decode::TraceStep st;
        st.block = s[0];
        st.committed = s[1];
        st.accepted = s[2];
        st.rejected = s[3];
        st.drafts_present = st.accepted + st.rejected;
        st.lookahead = s[4];
        st.rows = s[5];
        st.rows_masked = s[6];
        st.rows_draft = s[7];
        st.rows_committed = s[8];
        st.accepted_early = s[9];
        if (s.size() == 13) {
            st.checks = s[10];
            st.revised = s[11];
            st.remasked = s[12];
        }
        if (st.checks < 0 || st.revised < 0 || st.remasked < 0 ||
            st.revised + st.remasked > st.checks)
            throw Error("decision trace: step " + std::to_string(t.steps.size()) +
                        " revises more tokens than it checks");
        if (st.block < 0 || st.block >= t.gen / t.block || st.committed < 0 || st.accepted < 0 ||
            st.rejected < 0 || st.accepted_early < 0 || st.accepted_early > st.accepted ||
            st.accepted > st.committed || st.lookahead < 0 || st.rows < 0)
            throw Error("decision trace: step " + std::to_string(t.steps.size()) +
                        " has a count out of range");
        if (!t.steps.empty() && st.block != t.steps.back().block &&
            st.block != t.steps.back().block + 1)
            throw Error("decision trace: step " + std::to_string(t.steps.size()) +
                        " skips or revisits a block (blocks are decoded in order)");
        if (t.steps.empty() && st.block != 0)
            throw Error("decision trace: the first step is not in block 0");
        t.steps.push_back(st);
    }
    if (t.steps.empty()) throw Error("decision trace: no steps");
    // Every block the trace decoded commits exactly its length (an early stop ends it after a
    // complete block).
    std::vector<int> per_block(static_cast<size_t>(t.n_blocks()), 0);
    // A remasked token is committed again within the same block.
    for (const auto& st : t.steps)
        per_block[st.block] += st.committed - st.remasked;
    for (int b = 0; b < t.blocks_decoded(); ++b) {
        if (per_block[b] != t.block)
            throw Error("decision trace: block " + std::to_string(b) + " commits " +
                        std::to_string(per_block[b]) + " positions, not its " +
                        std::to_string(t.block));
    }
    if (!t.stopped_early && t.blocks_decoded() != t.n_blocks())
        throw Error("decision trace: " + std::to_string(t.blocks_decoded()) + " of " +
                    std::to_string(t.n_blocks()) + " blocks decoded without an early stop");
    return t;
}

namespace {

void read_trace_file(const std::string& path, std::vector<decode::DecisionTrace>& all,
                     std::vector<int64_t>& nfe) {
    std::ifstream f(path);
    if (!f) throw Error("cannot read the decision trace '" + path + "'");
    std::string line;
    int line_no = 0;
    while (std::getline(f, line)) {
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        try {
            const auto j = nlohmann::json::parse(line);
            all.push_back(trace_from_json(j));
            nfe.push_back(j.value("nfe", static_cast<int64_t>(all.back().steps.size())));
        } catch (const std::exception& e) {
            throw Error(path + ":" + std::to_string(line_no) + ": " + e.what());
        }
    }
    if (all.empty()) throw Error("the decision trace '" + path + "' holds no trace");
}

}  // namespace

std::vector<decode::DecisionTrace> read_traces(const std::string& path, int n) {
    std::vector<decode::DecisionTrace> all;
    std::vector<int64_t> nfe;
    read_trace_file(path, all, nfe);
    const size_t total = all.size();
    if (n <= 0 || static_cast<size_t>(n) >= total) return all;
    // A fixed pseudo-random sample (Fisher-Yates with the standard mt19937_64, seed 1): spread
    // through the file without a stride's aliasing with the task file's period (mix-1000 cycles
    // through its tasks, so every 20th problem is the same task, and so is every 618th).
    std::vector<size_t> idx(total);
    for (size_t i = 0; i < total; ++i)
        idx[i] = i;
    std::mt19937_64 rng(1);
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
        const size_t j = i + static_cast<size_t>(rng() % (total - i));
        std::swap(idx[i], idx[j]);
    }
    idx.resize(static_cast<size_t>(n));
    std::sort(idx.begin(), idx.end());
    std::vector<decode::DecisionTrace> out;
    for (size_t i : idx) {
        out.push_back(all[i]);
        out.back().source +=
            " (sample of " + std::to_string(n) + " of " + std::to_string(total) + " traces)";
    }
    return out;
}

decode::DecisionTrace read_trace(const std::string& path, int index) {
    std::vector<decode::DecisionTrace> all;
    std::vector<int64_t> nfe;
    read_trace_file(path, all, nfe);
    if (index >= static_cast<int>(all.size()))
        throw Error("--replay-index " + std::to_string(index) + ": '" + path + "' holds " +
                    std::to_string(all.size()) + " traces");
    if (index >= 0) return all[index];
    // The trace of median forward count (the lower median; ties to the first).
    std::vector<size_t> order(all.size());
    for (size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return nfe[a] < nfe[b]; });
    decode::DecisionTrace t = all[order[(order.size() - 1) / 2]];
    t.source += " (median-NFE trace of " + std::to_string(all.size()) + ")";
    return t;
}

std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& what) {
    std::vector<int32_t> ids;
    std::istringstream is(text);
    std::string tok;
    while (is >> tok) {
        char* end = nullptr;
        errno = 0;
        long long v = std::strtoll(tok.c_str(), &end, 10);
        if (*end != '\0' || errno != 0 || v < 0 || v > INT32_MAX) {
            throw Error(what + ": '" + tok + "' is not a token id");
        }
        ids.push_back(static_cast<int32_t>(v));
    }
    return ids;
}

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error("cannot read '" + path + "'");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

}  // namespace llada::tools
