// llada-forward: the logits of one canvas, every row, written as raw float32 (the fixtures'
// format), for parity checks against llama.cpp and the PyTorch reference.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "model/model.h"
#include "runtime/device.h"
#include "tools/args.h"
#include "util/error.h"

using namespace llada;

namespace {

std::vector<int32_t> parse_ids(const std::string& text, const std::string& what) {
    std::vector<int32_t> ids;
    std::istringstream is(text);
    std::string tok;
    while (is >> tok) {
        char* end = nullptr;
        long v = std::strtol(tok.c_str(), &end, 10);
        if (*end != '\0' || v < 0 || v > INT32_MAX) {
            throw Error(what + ": '" + tok + "' is not a token id");
        }
        ids.push_back(static_cast<int32_t>(v));
    }
    if (ids.empty()) throw Error(what + " holds no token ids");
    return ids;
}

}  // namespace

int main(int argc, char** argv) {
    return tools::run_tool([&] {
        std::string model_path, tokens_text, tokens_file, out_path;
        int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        tools::ArgTable args("llada-forward",
                             "Computes the logits of every position of a canvas in one forward "
                             "pass\nand writes them as float32 [n_tokens][n_vocab], row i = "
                             "position i (unshifted).");
        args.string({"-m", "--model"}, "FILE", "GGUF model", &model_path);
        args.string({"--tokens"}, "\"ID ID ...\"", "the canvas as token ids", &tokens_text);
        args.string({"--tokens-file"}, "FILE", "file holding the canvas ids (whitespace separated)",
                    &tokens_file);
        args.string({"--out"}, "FILE", "where to write the logits", &out_path);
        args.integer({"-t", "--threads"}, "N", "threads", &threads, 1, 1024);
        if (!args.parse(argc, argv)) return 0;
        if (model_path.empty()) throw Error("-m/--model is required");
        if (out_path.empty()) throw Error("--out is required");
        if (tokens_text.empty() == tokens_file.empty()) {
            throw Error("give exactly one of --tokens and --tokens-file");
        }
        if (!tokens_file.empty()) {
            std::ifstream f(tokens_file);
            if (!f) throw Error("cannot read '" + tokens_file + "'");
            std::stringstream ss;
            ss << f.rdbuf();
            tokens_text = ss.str();
        }
        std::vector<int32_t> tokens =
            parse_ids(tokens_text, tokens_file.empty() ? "--tokens" : tokens_file);
        auto model = model::Model::load(model_path);
        const auto& hp = model->hparams();
        const int n = static_cast<int>(tokens.size());
        if (n > hp.n_ctx) {
            throw Error(std::to_string(n) + " tokens exceed the context length " +
                        std::to_string(hp.n_ctx));
        }
        runtime::ThreadPool pool(threads);
        auto device = runtime::make_cpu_device(pool);
        model::Session session(*model, *device, 1, n, n, n);
        std::vector<int32_t> pos(n), seq(n, 0), rows(n);
        for (int i = 0; i < n; ++i)
            pos[i] = rows[i] = i;
        int32_t kv_len = n;
        runtime::Batch b{n, tokens.data(), pos.data(), seq.data(), n, rows.data(), &kv_len};
        const float* logits = session.forward(b);
        std::FILE* f = std::fopen(out_path.c_str(), "wb");
        if (!f) throw Error("cannot create '" + out_path + "'");
        const size_t count = static_cast<size_t>(n) * hp.n_vocab;
        const bool ok = std::fwrite(logits, sizeof(float), count, f) == count;
        if (std::fclose(f) != 0 || !ok) throw Error("writing '" + out_path + "' failed");
        std::fprintf(stderr, "wrote %d x %lld logits to %s\n", n,
                     static_cast<long long>(hp.n_vocab), out_path.c_str());
        return 0;
    });
}
