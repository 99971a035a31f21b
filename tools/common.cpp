// Pieces shared by the command-line tools.
#include "tools/common.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernels/kernels.h"
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
    lm.ids.mask = lm.tok->mask();
    lm.ids.eos = lm.tok->eos();
    lm.ids.eot = lm.tok->eot();
    return lm;
}

std::string chat_wrap(const tokenizer::Tokenizer& tok, const std::string& user) {
    for (const char* t : {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}) {
        if (tok.find_token(t) < 0) {
            throw Error(
                std::string("--chat: the model has no chat format (its vocabulary has no ") + t +
                " token); give the prompt without --chat");
        }
    }
    // LLaDA-8B-Instruct's template: LLaMA-3 headers; the BOS is added by the tokenizer.
    return "<|start_header_id|>user<|end_header_id|>\n\n" + user +
           "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
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
    args.flag({"--full-logits"},
              "write vocabulary-wide logits rows instead of the fused LM-head reduction",
              &full_logits);
}

void DecodeFlags::finish(const ArgTable& args, const model::Model& model) {
    const auto& g = model.gguf();
    // A causal model is decoded token by token unless the user asks otherwise.
    if (!args.given("--policy") && model.hparams().causal) policy = "ar";
    auto hint = [&](const char* key, int fallback) {
        auto v = g.opt_uint(key);
        return v && *v > 0 && *v < (1u << 20) ? static_cast<int>(*v) : fallback;
    };
    if (!args.given("--gen")) opt.gen = hint("llada_cpp.gen_length", 128);
    if (!args.given("--block")) {
        opt.block = hint("llada_cpp.block_length", 32);
        if (opt.gen % opt.block != 0) opt.block = opt.gen;
    }
    if (!args.given("--steps")) opt.steps = opt.gen;
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
}

void DeviceFlags::add_to(ArgTable& args) {
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
                "npu-sim tile formats: model (Q4_0 -> TQ4, Q8_0 -> TQ8, float -> TF16;\n"
                "default) or tq4 (TQ4, TQ8 for FFN down)",
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
