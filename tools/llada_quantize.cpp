// llada-quantize: re-quantise a GGUF or a Hugging Face directory to one of llama-quantize's file
// types with its per-tensor mix (tools/quant_mix.h; TQ4 puts FFN down at TQ8) unless --pure, or
// write a random-weight model of any shape (up to LLaDA-8B's and Dream-7B's) for speed and memory
// work.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "runtime/thread_pool.h"
#include "tools/args.h"
#include "tools/synthetic.h"
#include "util/error.h"

using namespace llada;

int main(int argc, char** argv) {
    return tools::run_tool([&]() -> int {
        std::string in, out, type_name, shape_spec;
        int seed = 1;
        int threads = 0;
        tools::ArgTable args(
            "llada-quantize",
            "Re-quantises a GGUF or a Hugging Face directory, as llama-quantize does:\n"
            "  llada-quantize --in IN.gguf --out OUT.gguf --type Q4_K_M\n"
            "or writes a random-weight model of a given shape:\n"
            "  llada-quantize --synthetic 1b --type F16 --out 1b-f16.gguf\n"
            "Shapes: tiny, 1b (d 2048, 16 layers, ffn 5632, vocab 32000), 8b (LLaDA-8B),\n"
            "dream-7b (Dream-7B: Qwen2's block with Q/K/V biases), llada-moe (LLaDA-MoE-7B-A1B:\n"
            "64 experts, 8 per token), with overrides, e.g.\n"
            "8b,layers=4 or d=1024,layers=8,heads=8,ffn=2816,vocab=32000 or arch=dream.\n"
            "Types: F32, F16, BF16; llama-quantize's Q8_0, Q6_K, Q5_K_M, Q5_K_S, Q5_1, Q5_0,\n"
            "Q4_K_M, Q4_K_S, Q4_1, Q4_0, IQ4_NL, IQ4_XS, Q3_K_L, Q3_K_M, Q3_K_S, Q2_K, Q2_K_S\n"
            "(Q3_K, Q4_K, Q5_K: the _M ones); llada.cpp's tile formats TQ4, TQ8, TF16.\n"
            "The quantised types are llama-quantize's mixes, with its per-tensor rules and its\n"
            "general.file_type numbers: the head (output.weight, or token_embd.weight when tied)\n"
            "in Q6_K (Q8_0 stays Q8_0), and in the K-quant and IQ4 mixes more bits for some V\n"
            "projections, FFN down and attention output projections (e.g. Q4_K_M: Q6_K for about\n"
            "half the layers' attn_v and ffn_down). MoE routers and 1-D tensors stay as they are.\n"
            "A tensor whose rows the chosen type's block does not divide (256 values for the\n"
            "K-quants and IQ4_XS) takes llama-quantize's fallback (e.g. Q4_K -> Q5_0), said on\n"
            "stderr. --pure puts every matrix in the type's own block type (Q4_K for Q4_K_M), as\n"
            "llama-quantize --pure. A synthetic model of a type's name (Q4_0, Q6_K, F16) has\n"
            "every matrix in it, one of a mix's name (Q4_K_M) the mix. No importance matrix:\n"
            "Q2_K_S is written without the one llama-quantize requires for it.\n"
            "TQ4, TQ8 and TF16 are llada.cpp's tile formats (docs/formats.md): matrices in the\n"
            "NPU's 32x32 tile order, which npu-sim reads in place and the CPU runs with the NPU's\n"
            "numerics; llama.cpp does not read them. --type TQ4 follows the published recipe\n"
            "(TQ8 for every FFN down projection) unless --pure.");
        args.string({"--in"}, "PATH", "GGUF or Hugging Face directory to re-quantise", &in);
        args.string({"--out"}, "FILE", "output GGUF", &out);
        args.string({"--type"}, "TYPE", "file type: Q4_K_M, Q8_0, F16, ... (listed above)",
                    &type_name);
        bool pure = false, no_progress = false;
        args.flag({"--pure"}, "every 2-D/3-D tensor in the type's default type (no mix)", &pure);
        args.flag({"--no-progress"}, "no progress line (drawn only on a terminal anyway)",
                  &no_progress);
        args.string({"--synthetic"}, "SHAPE", "write a random-weight model of this shape",
                    &shape_spec);
        args.integer({"--seed"}, "S", "seed of the random weights (default 1)", &seed, 0, 1 << 30);
        tools::add_threads_flag(args, &threads);
        if (!args.parse(argc, argv)) return 0;
        if (out.empty()) throw Error("--out FILE is required");
        if (type_name.empty()) throw Error("--type is required");
        if (in.empty() == shape_spec.empty())
            throw Error("give exactly one of --in and --synthetic");
        const tools::FileType& type = tools::parse_file_type(type_name);
        if (pure && in.empty()) {
            throw Error(
                "--pure applies to --in (a synthetic model of a type's name, e.g. Q6_K, is pure)");
        }
        const bool progress = !no_progress && isatty(STDERR_FILENO);
        runtime::ThreadPool pool(threads);
        const auto t0 = std::chrono::steady_clock::now();
        if (!shape_spec.empty()) {
            const tools::SyntheticShape s = tools::parse_shape(shape_spec);
            std::fprintf(stderr,
                         "writing %s: %s, %d layers, d %lld, %lld heads, ffn %lld, "
                         "vocab %lld, %.2f B parameters\n",
                         out.c_str(), s.arch.c_str(), s.n_layer, static_cast<long long>(s.n_embd),
                         static_cast<long long>(s.n_head), static_cast<long long>(s.n_ff),
                         static_cast<long long>(s.n_vocab), s.n_params() / 1e9);
            tools::write_synthetic(s, type, static_cast<uint64_t>(seed), out, pool, progress);
        } else {
            tools::requantize(in, out, type, pool, pure, progress);
        }
        const double dt =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "wrote %s in %.1f s\n", out.c_str(), dt);
        return 0;
    });
}
