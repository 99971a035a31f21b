// llada-tokenize: prints the token ids of a text under a GGUF model's vocabulary (like
// llama-tokenize).
#include <cstdio>
#include <string>
#include <vector>

#include "model/hf_model.h"
#include "tokenizer/tokenizer.h"
#include "tools/args.h"
#include "util/error.h"

using namespace llada;

namespace {

// All of stdin, unchanged: a trailing newline is part of the text.
std::string read_stdin() {
    std::string text;
    char buf[1 << 16];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof(buf), stdin)) > 0)
        text.append(buf, got);
    if (std::ferror(stdin)) throw Error("cannot read stdin");
    return text;
}

}  // namespace

int main(int argc, char** argv) {
    return tools::run_tool([&] {
        std::string model_path, prompt;
        bool no_bos = false, parse_special = false;
        tools::ArgTable args(
            "llada-tokenize",
            "Prints the token ids of TEXT (or of stdin, read raw with nothing trimmed) on one\n"
            "line, separated by spaces. A BOS token comes first when the model's vocabulary\n"
            "asks for one (tokenizer.ggml.add_bos_token, or the pre-tokenizer's default).");
        tools::add_model_flag(args, &model_path, nullptr, "GGUF model whose vocabulary is used");
        args.string({"-p", "--prompt"}, "TEXT",
                    "text to tokenize; without it, all of stdin is read byte for byte", &prompt);
        args.flag({"--no-bos"}, "never add a BOS token, even if the model asks for one", &no_bos);
        args.flag({"--parse-special"},
                  "match control tokens written in the text (e.g. \"<|endoftext|>\")\n"
                  "as single tokens",
                  &parse_special);
        if (!args.parse(argc, argv)) return 0;
        if (model_path.empty()) throw Error("no model given: use -m FILE.gguf (see --help)");

        auto gguf = model::open_model_file(model_path);
        auto tok = tokenizer::Tokenizer::from_gguf(*gguf);
        std::string text = args.given("-p") ? prompt : read_stdin();
        bool add_bos = tok.add_bos_default() && !no_bos;
        std::vector<int32_t> ids = tok.encode(text, add_bos, parse_special);

        std::string line;
        for (size_t i = 0; i < ids.size(); ++i) {
            if (i > 0) line += ' ';
            line += std::to_string(ids[i]);
        }
        line += '\n';
        std::fwrite(line.data(), 1, line.size(), stdout);
        if (std::fflush(stdout) != 0) throw Error("cannot write to stdout");
        return 0;
    });
}
