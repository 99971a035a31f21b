// llada-forward: the logits of one canvas, every row, written as raw float32 (the fixtures'
// format), for parity checks against llama.cpp and the PyTorch reference.
#include <cstdio>
#include <thread>

#include "format/output_file.h"
#include "model/model.h"
#include "runtime/device.h"
#include "tools/common.h"
#include "util/error.h"

using namespace llada;

int main(int argc, char** argv) {
    return tools::run_tool([&] {
        std::string model_path, tokens_text, tokens_file, out_path;
        int threads = 0;
        tools::ArgTable args("llada-forward",
                             "Computes the logits of every position of a canvas in one forward "
                             "pass\nand writes them as float32 [n_tokens][n_vocab], row i = "
                             "position i (unshifted).");
        tools::add_model_flag(args, &model_path, nullptr);
        args.string({"--tokens"}, "\"ID ID ...\"", "the canvas as token ids", &tokens_text);
        args.string({"--tokens-file"}, "FILE", "file holding the canvas ids (whitespace separated)",
                    &tokens_file);
        args.string({"--out"}, "FILE", "where to write the logits", &out_path);
        tools::add_threads_flag(args, &threads);
        int block = 0;
        args.integer({"--block"}, "N",
                     "a block-causal architecture's attention blocks (llada2; default: the\n"
                     "file's llada_cpp.block_length, else 32)",
                     &block, 1, 1 << 20);
        if (!args.parse(argc, argv)) return 0;
        if (model_path.empty()) throw Error("-m/--model is required");
        if (out_path.empty()) throw Error("--out is required");
        format::refuse_overwriting_input(out_path, {model_path, tokens_file});
        if (tokens_text.empty() == tokens_file.empty()) {
            throw Error("give exactly one of --tokens and --tokens-file");
        }
        if (!tokens_file.empty()) tokens_text = tools::read_file(tokens_file);
        std::vector<int32_t> tokens =
            tools::parse_token_ids(tokens_text, tokens_file.empty() ? "--tokens" : tokens_file);
        if (tokens.empty()) throw Error("the canvas holds no token ids");
        auto model = model::Model::load(model_path);
        const auto& hp = model->hparams();
        const int n = static_cast<int>(tokens.size());
        if (n > hp.n_ctx) {
            throw Error(std::to_string(n) + " tokens exceed the context length " +
                        std::to_string(hp.n_ctx));
        }
        if (args.given("--block") && hp.attention_block == 0) {
            throw Error("--block applies to a block-causal architecture (llada2), not " + hp.arch);
        }
        runtime::PlanOptions opt;
        opt.attention_block = block;
        runtime::ThreadPool pool(threads);
        auto device = runtime::make_cpu_device(pool);
        model::Session session(*model, *device, 1, n, n, n, opt);
        std::vector<int32_t> pos(n), seq(n, 0), rows(n);
        for (int i = 0; i < n; ++i)
            pos[i] = rows[i] = i;
        int32_t kv_len = n;
        runtime::Batch b{n, tokens.data(), pos.data(), seq.data(), n, rows.data(), &kv_len};
        const float* logits = session.forward(b);
        format::OutputFile f(out_path);
        f.write(logits, static_cast<size_t>(n) * hp.n_vocab * sizeof(float));
        f.commit();
        std::fprintf(stderr, "wrote %d x %lld logits to %s\n", n,
                     static_cast<long long>(hp.n_vocab), out_path.c_str());
        return 0;
    });
}
