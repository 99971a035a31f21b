// tokenizer.json -> the tokenizer.* GGUF metadata, as llama.cpp's converter writes it.
#include "tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <map>
#include <optional>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace llada::tokenizer {
namespace {

using nlohmann::json;

// The pre-tokenizer's regexes in the order they apply: each Split's pattern, then GPT-2's own
// pattern when a ByteLevel step splits too (use_regex, true when absent).
std::vector<std::string> pre_regexes(const json& pre, const std::string& file) {
    std::vector<std::string> out;
    auto one = [&](const json& p) {
        const std::string type = p.value("type", "");
        if (type == "Split") {
            const auto pat = p.find("pattern");
            if (pat == p.end() || !pat->is_object() || !pat->contains("Regex") ||
                !(*pat)["Regex"].is_string()) {
                throw Error(file +
                            ": a Split pre-tokenizer without a \"Regex\" pattern is not "
                            "supported");
            }
            out.push_back((*pat)["Regex"].get<std::string>());
        } else if (type == "ByteLevel") {
            if (p.value("use_regex", true)) {
                // HF's built-in GPT-2 pattern, as pretokenize.cpp spells it.
                out.push_back(
                    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
                    "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)");
            }
        } else if (type == "Digits") {
            out.push_back(p.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+");
        } else {
            throw Error(file + ": pre-tokenizer '" + type + "' is not supported");
        }
    };
    if (pre.is_null()) return out;
    if (pre.value("type", "") == "Sequence") {
        for (const json& p : pre.value("pretokenizers", json::array()))
            one(p);
    } else {
        one(pre);
    }
    return out;
}

// A special token named in tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> token_text(const json& cfg, const char* key) {
    const auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null()) return std::nullopt;
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
        return (*it)["content"].get<std::string>();
    return std::nullopt;
}

}  // namespace

namespace {

void convert(const format::HfDirectory& dir, int64_t vocab_size, bool add_bos_default,
             format::GgufWriter& w) {
    const std::string file = "'" + dir.path() + "/tokenizer.json'";
    const json& tj = dir.tokenizer();
    const json& tc = dir.tokenizer_config();
    const json& config = dir.config();
    const json model = tj.value("model", json::object());
    const std::string type = model.value("type", "");
    if (type != "BPE") {
        throw Error(file + ": model type '" + type +
                    "' is not supported (only byte-level BPE vocabularies load)");
    }
    if (model.value("byte_fallback", false)) {
        throw Error(file +
                    ": a BPE with byte_fallback (SentencePiece style) is not supported; "
                    "only byte-level BPE");
    }
    const json norm = tj.value("normalizer", json());
    if (!norm.is_null() && norm.value("type", "") != "NFC") {
        // llama.cpp ignores Qwen2's NFC too; other normalisers change the text.
        throw Error(file + ": normalizer '" + norm.value("type", "?") +
                    "' is not supported (none, or NFC)");
    }
    const std::vector<std::string> regexes = pre_regexes(tj.value("pre_tokenizer", json()), file);
    const std::string pre = pre_type_for_regexes(regexes);
    if (pre.empty()) {
        std::string list;
        for (const auto& r : regexes)
            list += (list.empty() ? "" : "', '") + r;
        throw Error(file + ": the pre-tokenizer's regexes ('" + list +
                    "') are not those of a supported pre-type (" + supported_pre_types() + ")");
    }

    // Ids -> texts: the model's vocabulary, then the added tokens over it.
    const json vocab = model.value("vocab", json::object());
    if (!vocab.is_object()) throw Error(file + ": model.vocab is not an object");
    std::map<int64_t, std::pair<std::string, TokenType>> by_id;
    for (const auto& [text, id] : vocab.items()) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0)
            throw Error(file + ": token '" + text + "' has no valid id");
        by_id[id.get<int64_t>()] = {text, TokenType::kNormal};
    }
    for (const json& a : tj.value("added_tokens", json::array())) {
        if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
            !a["content"].is_string()) {
            throw Error(file + ": an added token without an integer id and a content string");
        }
        if (a["id"].get<int64_t>() < 0)
            throw Error(file + ": added token '" + a["content"].get<std::string>() +
                        "' has a negative id");
        by_id[a["id"].get<int64_t>()] = {
            a["content"].get<std::string>(),
            a.value("special", false) ? TokenType::kControl : TokenType::kUserDefined};
    }
    if (by_id.empty()) throw Error(file + ": the vocabulary is empty");
    const int64_t max_id = by_id.rbegin()->first;
    // Ids index the token table: a vocabulary past 2^24 ids (LLaDA's and Dream's are ~150k) is a
    // damaged file, not a table to allocate.
    if (max_id >= (int64_t{1} << 24) || vocab_size > (int64_t{1} << 24)) {
        throw Error(file + ": token id " + std::to_string(std::max(max_id, vocab_size - 1)) +
                    " is past the 2^24 ids a vocabulary may have");
    }
    if (vocab_size <= 0) vocab_size = max_id + 1;
    if (max_id >= vocab_size) {
        throw Error(file + ": token '" + by_id.rbegin()->second.first + "' has id " +
                    std::to_string(max_id) + " but config.json's vocab_size is " +
                    std::to_string(vocab_size));
    }
    std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
    std::vector<int32_t> types(static_cast<size_t>(vocab_size),
                               static_cast<int32_t>(TokenType::kUnused));
    for (int64_t i = 0; i < vocab_size; ++i)
        tokens[i] = "[PAD" + std::to_string(i) + "]";
    for (const auto& [id, tt] : by_id) {
        tokens[id] = tt.first;
        types[id] = static_cast<int32_t>(tt.second);
    }

    std::vector<std::string> merges;
    for (const json& m : model.value("merges", json::array())) {
        if (m.is_string()) {
            merges.push_back(m.get<std::string>());
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
            merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
        } else {
            throw Error(file + ": merge " + std::to_string(merges.size()) +
                        " is neither \"a b\" nor [\"a\", \"b\"]");
        }
    }

    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", pre);
    w.set_array_string("tokenizer.ggml.tokens", tokens);
    w.set_array_i32("tokenizer.ggml.token_type", types);
    w.set_array_string("tokenizer.ggml.merges", merges);

    // Special ids: by text from tokenizer_config.json, else by id from config.json.
    auto id_of = [&](const std::string& text, const char* key) -> int64_t {
        for (const auto& [id, tt] : by_id) {
            if (tt.first == text) return id;
        }
        throw Error("'" + dir.path() + "/tokenizer_config.json': " + key + " '" + text +
                    "' is not in the vocabulary");
    };
    auto special = [&](const char* tc_key, const char* config_key, const char* gguf_key) {
        int64_t id = -1;
        if (auto t = token_text(tc, tc_key)) {
            id = id_of(*t, tc_key);
        } else if (config.contains(config_key) && config[config_key].is_number_integer()) {
            id = config[config_key].get<int64_t>();
        }
        if (id < 0) return;
        if (id >= vocab_size) {
            throw Error("'" + dir.path() + "/config.json': " + config_key + " " +
                        std::to_string(id) + " is outside the vocabulary of " +
                        std::to_string(vocab_size));
        }
        w.set_u32(gguf_key, static_cast<uint32_t>(id));
    };
    special("bos_token", "bos_token_id", "tokenizer.ggml.bos_token_id");
    special("eos_token", "eos_token_id", "tokenizer.ggml.eos_token_id");
    special("pad_token", "pad_token_id", "tokenizer.ggml.padding_token_id");
    // The mask token: config.json's id is what the model was trained with.
    if (config.contains("mask_token_id") && config["mask_token_id"].is_number_integer()) {
        special("", "mask_token_id", "tokenizer.ggml.mask_token_id");
    } else {
        special("mask_token", "", "tokenizer.ggml.mask_token_id");
    }
    const auto add_bos = tc.find("add_bos_token");
    w.set_bool("tokenizer.ggml.add_bos_token", add_bos != tc.end() && add_bos->is_boolean()
                                                   ? add_bos->get<bool>()
                                                   : add_bos_default);

    // The chat template: tokenizer_config.json's (a string, or named templates of which
    // "default" is the one), else chat_template.jinja.
    std::string tmpl = dir.chat_template_file();
    if (const auto ct = tc.find("chat_template"); ct != tc.end()) {
        if (ct->is_string()) {
            tmpl = ct->get<std::string>();
        } else if (ct->is_array()) {
            for (const json& t : *ct) {
                if (t.value("name", "") == "default" && t.contains("template") &&
                    t["template"].is_string())
                    tmpl = t["template"].get<std::string>();
            }
        }
    }
    if (!tmpl.empty()) w.set_string("tokenizer.chat_template", tmpl);
}

}  // namespace

void hf_tokenizer_to_gguf(const format::HfDirectory& dir, int64_t vocab_size, bool add_bos_default,
                          format::GgufWriter& w) {
    try {
        convert(dir, vocab_size, add_bos_default, w);
    } catch (const nlohmann::json::exception& e) {
        // A member of another JSON type than the format's (a number where an object belongs).
        throw Error("'" + dir.path() +
                    "': tokenizer.json, tokenizer_config.json or config.json has a field of the "
                    "wrong type (" +
                    e.what() + ")");
    }
}

}  // namespace llada::tokenizer
