// Pieces shared by the command-line tools: the default model, loading one, prompts, files.
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

void check_commit_rule_flags(const ArgTable& args, double threshold, double factor) {
    if (args.given("--threshold") && threshold == 0.0)
        throw Error(decode::zero_error("--threshold", decode::option("--threshold")));
    if (args.given("--factor") && factor == 0.0)
        throw Error(decode::zero_error("--factor", decode::option("--factor")));
}

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
